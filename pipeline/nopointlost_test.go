package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// The tests of this file hold the engine and the planner to the promise
// that no point is lost whatever lastActivity means, and that a failure one
// variable causes stays with it.

func runCycle(t *testing.T, src pipeline.Source, st *pipelinetest.Store, w *pipelinetest.Writer, targets []pipeline.Target, rows int) pipeline.RunResult {
	t.Helper()
	return pipeline.NewEngine(src, w, st, pipeline.EngineOptions{VariablesPerRequest: 50, RowsPerRequest: rows, RetryWait: time.Millisecond}, nil, nil, nil).Run(context.Background(), targets)
}

// TestPlanRereadsTheLookbackOncePerRecheckPeriodAndTheNewPointsBetween
// holds the planner to its three answers for a variable with a mark: a
// re-read from min(mark - lookback, RereadMs) once its last re-read is its
// recheck period old, whatever lastActivity says; between re-reads its
// points after the mark alone, when its lastActivity moved or a point seen
// ahead fell due (always without skip_idle); otherwise nothing.
func TestPlanRereadsTheLookbackOncePerRecheckPeriodAndTheNewPointsBetween(t *testing.T) {
	const end = int64(10_000_000_000)
	const hwm, lookback = end - 600_000, int64(3_600_000)
	recheck := time.Hour
	v := pipeline.Variable{ID: "v", LastActivityMs: 42}
	period := pipeline.RecheckPeriod("v", recheck).Milliseconds()
	const skip, tail, reread = "skip", "tail", "reread"
	cases := []struct {
		name     string
		mark     pipeline.Mark
		recheck  time.Duration
		skipIdle bool
		want     string
		start    int64
	}{
		{"re-read just now", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: end - 1}, recheck, true, skip, 0},
		{"re-read one period ago", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: end - period}, recheck, true, reread, hwm - lookback},
		{"re-read one period ago, owing points from earlier", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: end - period, RereadMs: hwm - 3*lookback}, recheck, true, reread, hwm - 3*lookback},
		{"re-read just inside the period", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - period + 1, RecheckedMs: end - period + 1}, recheck, true, skip, 0},
		{"never re-read (a backfill's mark)", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42}, recheck, true, reread, hwm - lookback},
		// Schema 6 and older: every complete read was a re-read.
		{"a mark from before rechecked_ms, read just now", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1}, recheck, true, skip, 0},
		{"a mark from before rechecked_ms, active", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end - 1}, recheck, true, tail, hwm + 1},
		{"a mark from before rechecked_ms, read one period ago", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - period}, recheck, true, reread, hwm - lookback},
		{"a re-read on record ahead of the clock", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end + 86_400_000, RecheckedMs: end + 86_400_000}, recheck, true, reread, hwm - lookback},
		{"a re-read on record at the cycle's end exactly", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end, RecheckedMs: end}, recheck, true, tail, hwm + 1},
		{"a mark at the cycle's end exactly (nothing after it to read up to the end)", pipeline.Mark{HwmMs: end, LastActivityMs: 41, CheckedMs: end - 1, RecheckedMs: end - 1}, recheck, true, reread, end - lookback},
		{"a re-read asked for", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: 1}, recheck, true, reread, hwm - lookback},
		{"lastActivity moved", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end - 1, RecheckedMs: end - 1, RereadMs: hwm - 3*lookback}, recheck, true, tail, hwm + 1},
		{"lastActivity moved, re-read due", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end - 1, RecheckedMs: end - period}, recheck, true, reread, hwm - lookback},
		{"a point ahead fell due", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: end - 1, FutureMs: end}, recheck, true, tail, hwm + 1},
		{"a point ahead not yet due", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: end - 1, FutureMs: end + 1}, recheck, true, skip, 0},
		{"without skip_idle", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: end - 1}, recheck, false, tail, hwm + 1},
		{"no recheck period", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: end - 1}, 0, true, reread, hwm - lookback},
		{"a mark ahead of the clock", pipeline.Mark{HwmMs: end + 2*lookback, LastActivityMs: 41, CheckedMs: end - 1, RecheckedMs: end - 1}, recheck, true, reread, end - lookback},
	}
	for _, c := range cases {
		got, skipped := pipeline.Plan([]pipeline.Variable{v, {ID: "other", LastActivityMs: 1}}, map[string]pipeline.Mark{"v": c.mark},
			pipeline.PlanOptions{Lookback: time.Duration(lookback) * time.Millisecond, Floor: 1, End: end, SkipIdle: c.skipIdle, IdleRecheck: c.recheck})
		if (skipped == 1) != (c.want == skip) || len(got)+skipped != 2 {
			t.Errorf("%s: skipped %d, planned %d; want %s", c.name, skipped, len(got), c.want)
			continue
		}
		for _, tg := range got {
			if !tg.ReadFuture {
				t.Errorf("%s: a cycle target does not look past its end", c.name)
			}
			if tg.Variable.ID != "v" {
				continue
			}
			owed := min(c.mark.HwmMs-lookback, c.mark.RereadMs)
			if c.mark.RereadMs == 0 {
				owed = c.mark.HwmMs - lookback
			}
			if tg.Start > tg.End {
				t.Errorf("%s: a target of %d..%d, which starts after its end", c.name, tg.Start, tg.End)
			}
			if got := map[bool]string{true: tail, false: reread}[tg.Tail]; got != c.want || tg.Start != c.start || tg.End != end {
				t.Errorf("%s: a %s of %d..%d; want a %s from %d", c.name, got, tg.Start, tg.End, c.want, c.start)
			}
			if tg.Tail && tg.Reread != owed {
				t.Errorf("%s: the read of the new points commits RereadMs %d, want what the mark owed, %d", c.name, tg.Reread, owed)
			}
			if tg.Tail && tg.From != c.mark.HwmMs+1 {
				t.Errorf("%s: the read of the new points answers from %d, want just after the mark, %d, whatever the floor", c.name, tg.From, c.mark.HwmMs+1)
			}
		}
	}
}

func TestRecheckPeriodsSpreadBetweenHalfAndAllOfIdleRecheck(t *testing.T) {
	recheck := time.Hour
	lo, hi := recheck, time.Duration(0)
	buckets := make([]int, 10)
	for i := range 10_000 {
		p := pipeline.RecheckPeriod(fmt.Sprintf("var%05d", i), recheck)
		if p < recheck/2 || p > recheck {
			t.Fatalf("period %s outside [%s, %s]", p, recheck/2, recheck)
		}
		lo, hi = min(lo, p), max(hi, p)
		buckets[int(float64(p-recheck/2)/float64(recheck/2)*9.999)]++
	}
	// An even spread puts 1 000 periods in each tenth of the range; a fleet
	// read at once is then re-read a tenth at a time, not all at once.
	for i, n := range buckets {
		if n < 800 || n > 1200 {
			t.Fatalf("tenth %d of the recheck range holds %d of 10 000 periods (all: %v)", i, n, buckets)
		}
	}
	if pipeline.RecheckPeriod("var00001", recheck) != pipeline.RecheckPeriod("var00001", recheck) {
		t.Fatal("a variable's period is not stable")
	}
}

func TestEngineLeavesPointsAheadOfTheCycleForTheCycleAfterThem(t *testing.T) {
	const start = int64(1_700_000_000_000)
	src, targets := pipelinetest.Fixture(3, 20, start)
	end := targets[0].End
	// v000 has a point 2 s after the cycle's end (a device clock ahead);
	// v001 reported once, during the cycle, after its end.
	src.Add("v000", pipeline.Point{TsMs: end + 2000, Value: 1, Context: []byte("{}")})
	src.Add("v001", pipeline.Point{TsMs: end + 5, Value: 2, Context: []byte("{}")})
	for i := range targets {
		targets[i].ReadFuture = true
		targets[i].Variable.LastActivityMs = end + 5 // newest-ts reading: the point's own stamp
	}
	st := &pipelinetest.Store{}
	w := &pipelinetest.Writer{}
	res := runCycle(t, src, st, w, targets, 7)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	for id, wantFuture := range map[string]int64{"v000": end + 2000, "v001": end + 5, "v002": 0} {
		m := st.Marks()[id]
		if m.FutureMs != wantFuture || m.CheckedMs != end || m.HwmMs > end {
			t.Errorf("%s: mark %+v; want FutureMs %d, CheckedMs %d, hwm not past %d", id, m, wantFuture, end, end)
		}
		if m.LastActivityMs != 0 {
			t.Errorf("%s: recorded lastActivity %d past the read's end %d", id, m.LastActivityMs, end)
		}
		for ts := range w.Rows(id) {
			if ts > end {
				t.Errorf("%s: loaded the point at %d, after the cycle's end %d", id, ts, end)
			}
		}
	}
	// The next cycles: not yet due, v000 is still skipped when idle; once
	// its time has come, both are read and land.
	vars := make([]pipeline.Variable, len(targets))
	for i := range targets {
		vars[i] = targets[i].Variable
	}
	marks, _ := st.Load(context.Background())
	next, _ := pipeline.Plan(vars, marks, pipeline.PlanOptions{Lookback: time.Minute, Floor: 1, End: end + 2000, SkipIdle: true, IdleRecheck: time.Hour})
	if len(next) != 3 {
		t.Fatalf("planned %d of 3 once every point ahead fell due (lastActivity was never recorded as read)", len(next))
	}
	runCycle(t, src, st, w, next, 7)
	pipelinetest.CheckLoaded(t, src, w, []string{"v000", "v001", "v002"})
}

func TestEngineNotesThePointsAheadHiddenByCutFrames(t *testing.T) {
	const start = int64(1_700_000_000_000)
	src, targets := pipelinetest.Fixture(2, 10, start)
	end := targets[0].End
	// Far more points ahead than one frame holds, all on the millisecond
	// after the end and later: halving must end in a closed read of the
	// end's millisecond and a noted future.
	for i := range 30 {
		src.Add("v000", pipeline.Point{TsMs: end + 1 + int64(i), Value: 3, Context: []byte("{}")})
	}
	targets[0].ReadFuture, targets[1].ReadFuture = true, true
	st := &pipelinetest.Store{}
	w := &pipelinetest.Writer{}
	if res := runCycle(t, src, st, w, targets, 4); len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	if m := st.Marks()["v000"]; m.FutureMs == 0 || m.FutureMs > end+1 || m.HwmMs > end {
		t.Fatalf("v000 mark %+v: want FutureMs in (0, %d], hwm not past %d", m, end+1, end)
	}
	if n := len(w.Rows("v000")); n != 10 {
		t.Fatalf("v000: loaded %d points, want the 10 up to the end", n)
	}
}

func TestEngineAcceptsAFullFrameOfOneMillisecond(t *testing.T) {
	const ts = int64(1_700_000_000_000)
	src, targets := pipelinetest.Fixture(1, 0, ts)
	// Five rows on one timestamp and a limit of 5, then of 1: the
	// millisecond cannot be split, and the table keeps one row anyway.
	for i := range 5 {
		src.Add("v000", pipeline.Point{TsMs: ts, Value: float64(i), Context: []byte("{}")})
	}
	src.Add("v000", pipeline.Point{TsMs: ts + 1, Value: 9, Context: []byte("{}")})
	for _, limit := range []int{5, 1} {
		targets[0].Start, targets[0].End = ts, ts+1
		st := &pipelinetest.Store{}
		w := &pipelinetest.Writer{}
		res := runCycle(t, src, st, w, targets, limit)
		if len(res.Failed) != 0 || len(w.Rows("v000")) != 2 || st.Marks()["v000"].HwmMs != ts+1 {
			t.Fatalf("limit %d: failed %v, loaded %d timestamps, mark %+v; want both timestamps and the mark at %d", limit, res.Failed, len(w.Rows("v000")), st.Marks()["v000"], ts+1)
		}
	}
}

func TestEngineWithOneRowPerRequestIsExact(t *testing.T) {
	src, targets := pipelinetest.Fixture(4, 25, 1_700_000_000_000)
	for i := range targets {
		targets[i].ReadFuture = true
	}
	st := &pipelinetest.Store{}
	w := &pipelinetest.Writer{}
	if res := runCycle(t, src, st, w, targets, 1); len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	pipelinetest.CheckLoaded(t, src, w, []string{"v000", "v001", "v002", "v003"})
}

// failOn makes src answer a request naming one of bad as a source does
// when it can tie the failure to the variable (decodeErr, tie) or only say
// that a variable may have caused it (scopedErr).
func failOn(src *pipelinetest.Source, tie bool, bad ...string) {
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
		for i, id := range req.VariableIDs {
			if slices.Contains(bad, id) {
				if tie {
					return decodeErr{i}
				}
				return scopedErr{}
			}
		}
		return serve(sink)
	}
}

type decodeErr struct{ i int }

func (e decodeErr) Error() string      { return fmt.Sprintf("frame %d: value \"n/a\" is not a number", e.i) }
func (e decodeErr) VariableIndex() int { return e.i }

type scopedErr struct{}

func (scopedErr) Error() string        { return "400 Bad Request: invalid data" }
func (scopedErr) VariableScoped() bool { return true }

func TestEngineConfinesAFailureToTheVariableThatCausedIt(t *testing.T) {
	for _, tie := range []bool{true, false} {
		t.Run(fmt.Sprintf("tied=%v", tie), func(t *testing.T) {
			src, targets := pipelinetest.Fixture(50, 5, 1_700_000_000_000)
			src.Add("v000", pipeline.Point{TsMs: 1_700_000_000_500, Value: math.NaN(), Context: []byte("{}")})
			src.Add("v001", pipeline.Point{TsMs: 1_700_000_000_500, Value: math.Inf(-1), Context: []byte("{}")})
			failOn(src, tie, "v037")
			st := &pipelinetest.Store{}
			w := &pipelinetest.Writer{}
			res := runCycle(t, src, st, w, targets, 1000)
			if len(res.Failed) != 1 || res.Failed[0].Variable.ID != "v037" {
				t.Fatalf("failed %v; want v037 alone", res.Failed)
			}
			if msg := res.Failed[0].Err.Error(); !strings.Contains(msg, "invalid data") && !strings.Contains(msg, "n/a") {
				t.Fatalf("v037 failed with %q, not the source's error", msg)
			}
			if len(st.Marks()) != 49 {
				t.Fatalf("%d marks moved, want the 49 good variables'", len(st.Marks()))
			}
			var good []string
			for _, tg := range targets {
				if tg.Variable.ID != "v037" {
					good = append(good, tg.Variable.ID)
				}
			}
			pipelinetest.CheckLoaded(t, src, w, good)
			if !math.IsNaN(w.Rows("v000")[1_700_000_000_500].Value) || !math.IsInf(w.Rows("v001")[1_700_000_000_500].Value, -1) {
				t.Fatalf("non-finite values did not land: %v %v", w.Rows("v000")[1_700_000_000_500], w.Rows("v001")[1_700_000_000_500])
			}
			// Tied to its variable, the failure costs one more request; only
			// scoped, a bisection of 50 costs about 2·log2(50).
			if maxReq := map[bool]int{true: 2, false: 14}[tie]; src.Requests() > maxReq {
				t.Fatalf("%d requests to confine the failure, want at most %d", src.Requests(), maxReq)
			}
		})
	}
}

func TestEngineFailsARequestWideErrorWithoutSplitting(t *testing.T) {
	src, targets := pipelinetest.Fixture(8, 3, 1_700_000_000_000)
	src.OnSeries = func(pipeline.SeriesRequest, pipeline.FrameSink, func(pipeline.FrameSink) error) error {
		return errors.New("401 Unauthorized")
	}
	st := &pipelinetest.Store{}
	res := runCycle(t, src, st, &pipelinetest.Writer{}, targets, 100)
	if len(res.Failed) != 8 || src.Requests() != 1 {
		t.Fatalf("failed %d, calls %d; an account-wide failure must fail the request once, not be bisected", len(res.Failed), src.Requests())
	}
}

func TestIncrementalMarkNeverRecordsALastActivityPastTheReadsEnd(t *testing.T) {
	tg := pipeline.Target{Variable: pipeline.Variable{ID: "v", LastActivityMs: 2000}, End: 1500, Mark: pipeline.Mark{LastActivityMs: 900, HwmMs: 100}, HasMark: true}
	m, _ := pipeline.IncrementalMark(tg, pipeline.Outcome{MaxTs: 1400})
	if m.LastActivityMs != 900 || m.CheckedMs != 1500 || m.HwmMs != 1400 {
		t.Fatalf("mark %+v; want the old lastActivity 900 kept, checked at 1500, hwm 1400", m)
	}
	tg.Variable.LastActivityMs = 1500
	if m, _ = pipeline.IncrementalMark(tg, pipeline.Outcome{MaxTs: 1400, FutureMs: 1600}); m.LastActivityMs != 1500 || m.FutureMs != 1600 {
		t.Fatalf("mark %+v; want lastActivity 1500 and FutureMs 1600 recorded", m)
	}
}

// TestEngineNotesThePointAheadACutFrameShowed holds the earliest point
// ahead of the cycle to what the reads saw, under every cut and order the
// source may serve, with counts and without, and under a source that keeps
// the newest rows of an open request's frames and the oldest of a closed
// one's (the spec allows any rows, per request): there a closed re-read
// below the newest frame's rows, past the cycle's end, kept the point
// ahead as its frame's greatest; its count proved the frame up to that
// point alone, and the mark recorded a later point ahead, so under a
// frozen lastActivity the point waited for the variable's next re-read
// (the soak's seed 431785152198).
func TestEngineNotesThePointAheadACutFrameShowed(t *testing.T) {
	const start = int64(1_700_000_000_000)
	const mixed = pipelinetest.Cut(-1)
	for _, cut := range []pipelinetest.Cut{mixed, pipelinetest.CutAny, pipelinetest.CutNewestDesc, pipelinetest.CutOldestAsc, pipelinetest.CutNewestAsc, pipelinetest.CutNewestShuffled, pipelinetest.CutAnyShuffled} {
		for _, counts := range []bool{true, false} {
			for limit := 2; limit <= 5; limit++ {
				src, targets := pipelinetest.Fixture(1, 12, start)
				end := targets[0].End
				if cut == mixed {
					src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, _ func(pipeline.FrameSink) error) error {
						for i, id := range req.VariableIDs {
							var in []pipeline.Point
							for _, p := range src.Points(id) {
								if p.TsMs >= req.Start && p.TsMs <= req.End {
									in = append(in, p)
								}
							}
							if req.Limit > 0 && len(in) > req.Limit {
								if req.End > end+time.Hour.Milliseconds() {
									in = in[len(in)-req.Limit:]
								} else {
									in = in[:req.Limit]
								}
							}
							if err := pipelinetest.ServeFrame(sink, i, in); err != nil {
								return err
							}
						}
						return nil
					}
				} else {
					src.Cut = cut
				}
				// One point just ahead, then a run of them further on.
				src.Add("v000", pipeline.Point{TsMs: end + 1_450, Value: 1, Context: []byte("{}")})
				for i := range 20 {
					src.Add("v000", pipeline.Point{TsMs: end + 11_000 + int64(i)*10_000, Value: 2, Context: []byte("{}")})
				}
				targets[0].ReadFuture = true
				st := &pipelinetest.Store{}
				w := &pipelinetest.Writer{}
				opts := pipeline.EngineOptions{VariablesPerRequest: 50, RowsPerRequest: limit, RetryWait: time.Millisecond}
				if counts {
					opts.Counts = src
				}
				name := "mixed"
				if cut != mixed {
					name = cut.String()
				}
				if res := pipeline.NewEngine(src, w, st, opts, nil, nil, nil).Run(context.Background(), targets); len(res.Failed) != 0 {
					t.Fatalf("%s, counts %v, limit %d: failed %v", name, counts, limit, res.Failed)
				}
				if m := st.Marks()["v000"]; m.FutureMs <= end || m.FutureMs > end+1_450 {
					t.Errorf("%s, counts %v, limit %d: future %+d after the end, want in (0, 1450]", name, counts, limit, m.FutureMs-end)
				}
			}
		}
	}
}
