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
	// Two variables make one slot: v's phase comes round at at, the
	// latest instant at or before end that its slot's phase of the hour
	// falls on.
	at := pipeline.RecheckAt("v", recheck, 1, end)
	if at > end || end-at >= recheck.Milliseconds() {
		t.Fatalf("v's phase came round at %d, not in the hour up to %d", at, end)
	}
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
		{"re-read just before its phase came round", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: at - 1}, recheck, true, reread, hwm - lookback},
		{"re-read just before its phase came round, owing points from earlier", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: at - 1, RereadMs: hwm - 3*lookback}, recheck, true, reread, hwm - 3*lookback},
		{"re-read as its phase came round", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: at, RecheckedMs: at}, recheck, true, skip, 0},
		{"re-read a recheck period ago", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: end - recheck.Milliseconds()}, recheck, true, reread, hwm - lookback},
		{"never re-read (a backfill's mark)", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42}, recheck, true, reread, hwm - lookback},
		// Schema 6 and older: every complete read was a re-read.
		{"a mark from before rechecked_ms, read just now", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1}, recheck, true, skip, 0},
		{"a mark from before rechecked_ms, active", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end - 1}, recheck, true, tail, hwm + 1},
		{"a mark from before rechecked_ms, read before the phase came round", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: at - 1}, recheck, true, reread, hwm - lookback},
		{"a re-read on record ahead of the clock", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end + 86_400_000, RecheckedMs: end + 86_400_000}, recheck, true, reread, hwm - lookback},
		{"a re-read on record at the cycle's end exactly", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end, RecheckedMs: end}, recheck, true, tail, hwm + 1},
		{"a mark at the cycle's end exactly (nothing after it to read up to the end)", pipeline.Mark{HwmMs: end, LastActivityMs: 41, CheckedMs: end - 1, RecheckedMs: end - 1}, recheck, true, reread, end - lookback},
		{"a re-read asked for", pipeline.Mark{HwmMs: hwm, LastActivityMs: 42, CheckedMs: end - 1, RecheckedMs: 1}, recheck, true, reread, hwm - lookback},
		{"lastActivity moved", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end - 1, RecheckedMs: end - 1, RereadMs: hwm - 3*lookback}, recheck, true, tail, hwm + 1},
		{"lastActivity moved, re-read due", pipeline.Mark{HwmMs: hwm, LastActivityMs: 41, CheckedMs: end - 1, RecheckedMs: at - 1}, recheck, true, reread, hwm - lookback},
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

// TestRereadsComeOnceARecheckPeriodAtTheirSlotsPhase runs the planner's
// re-read schedule over days of five-minute cycles with an hour's
// idle_recheck: a fleet read at once (every variable re-read at t0) is
// re-read a slot at a time over the next hour and then once an hour each,
// never more than idle_recheck plus a cycle apart, also while the fleet
// grows from one slot to forty (its phases move); and the variables of a
// small fleet, one slot, are re-read in one cycle an hour.
func TestRereadsComeOnceARecheckPeriodAtTheirSlotsPhase(t *testing.T) {
	const t0 = int64(1_700_000_123_456)
	const cycle = int64(300_000)
	recheck := time.Hour
	hour := recheck.Milliseconds()
	vars := func(n int) []pipeline.Variable {
		vs := make([]pipeline.Variable, n)
		for i := range vs {
			vs[i] = pipeline.Variable{ID: fmt.Sprintf("var%05d", i), LastActivityMs: 7}
		}
		return vs
	}
	type schedule struct {
		perCycle []int              // re-reads in each cycle
		rereads  map[string][]int64 // each variable's re-reads (the cycles' ends)
	}
	run := func(t *testing.T, fleet func(k int) []pipeline.Variable, cycles int) schedule {
		marks := map[string]pipeline.Mark{}
		got := schedule{rereads: map[string][]int64{}}
		for k := 1; k <= cycles; k++ {
			end := t0 + int64(k)*cycle
			vs := fleet(k)
			for _, v := range vs {
				if _, ok := marks[v.ID]; !ok {
					// Read at once as the fleet was first synced (or joined).
					marks[v.ID] = pipeline.Mark{HwmMs: t0 - hour, LastActivityMs: 7, CheckedMs: end - cycle, RecheckedMs: end - cycle}
					got.rereads[v.ID] = []int64{end - cycle}
				}
			}
			targets, skipped := pipeline.Plan(vs, marks, pipeline.PlanOptions{Lookback: recheck, Floor: 1, End: end, SkipIdle: true, IdleRecheck: recheck, VariablesPerRequest: 50})
			if len(targets)+skipped != len(vs) {
				t.Fatalf("cycle %d: %d targets and %d skipped of %d variables", k, len(targets), skipped, len(vs))
			}
			n := 0
			for _, tg := range targets {
				if tg.Tail {
					t.Fatalf("cycle %d: %s read after its mark though nothing moved", k, tg.Variable.ID)
				}
				m := marks[tg.Variable.ID]
				m.CheckedMs, m.RecheckedMs = end, end
				marks[tg.Variable.ID] = m
				got.rereads[tg.Variable.ID] = append(got.rereads[tg.Variable.ID], end)
				n++
			}
			got.perCycle = append(got.perCycle, n)
		}
		for id, at := range got.rereads {
			for i := 1; i < len(at); i++ {
				if gap := at[i] - at[i-1]; gap > hour+cycle {
					t.Fatalf("%s re-read %d ms after its last re-read, more than idle_recheck and a cycle (%v)", id, gap, at)
				}
			}
			if last := t0 + int64(cycles)*cycle; last-at[len(at)-1] > hour+cycle {
				t.Fatalf("%s not re-read since %d, %d ms before the last cycle", id, at[len(at)-1], last-at[len(at)-1])
			}
		}
		return got
	}

	t.Run("a fleet of forty slots", func(t *testing.T) {
		const n, cycles = 2000, 36 * 12
		fleet := vars(n)
		got := run(t, func(int) []pipeline.Variable { return fleet }, cycles)
		for id, at := range got.rereads {
			// After its first phase, once an hour exactly: the spread of a
			// period of its own (between half and all of the hour) re-read
			// a variable every three quarters of an hour.
			for i := 2; i < len(at); i++ {
				if gap := at[i] - at[i-1]; gap != hour {
					t.Fatalf("%s re-read %d ms after its last re-read, want an hour (%v)", id, gap, at)
				}
			}
		}
		// A twelfth of the fleet each cycle once it is spread (the first
		// hour re-reads each slot at its phase too), never the whole fleet.
		for k, c := range got.perCycle {
			if c < n/12/2 || c > n/12*2 {
				t.Fatalf("cycle %d re-read %d of %d variables, want about a twelfth of them (%v)", k+1, c, n, got.perCycle)
			}
		}
	})

	t.Run("a small fleet, one slot", func(t *testing.T) {
		fleet := vars(24)
		got := run(t, func(int) []pipeline.Variable { return fleet }, 10*12)
		for k, c := range got.perCycle {
			if c != 0 && c != len(fleet) {
				t.Fatalf("cycle %d re-read %d of the %d variables: one slot's are re-read together (%v)", k+1, c, len(fleet), got.perCycle)
			}
		}
		if r := sum(got.perCycle); r < 9*len(fleet) || r > 11*len(fleet) {
			t.Fatalf("%d re-reads of %d variables in 10 hours, want one an hour each", r, len(fleet))
		}
	})

	t.Run("a fleet growing from one slot to forty", func(t *testing.T) {
		all := vars(2000)
		// The gaps are checked by run: the phases of the first 24 move as
		// the slots grow, and none of them waits past idle_recheck.
		run(t, func(k int) []pipeline.Variable { return all[:min(len(all), 24+k*7)] }, 36*12)
	})

	if pipeline.RecheckAt("var00001", recheck, 40, t0) != pipeline.RecheckAt("var00001", recheck, 40, t0) {
		t.Fatal("a variable's phase is not stable")
	}
}

func sum(xs []int) (s int) {
	for _, x := range xs {
		s += x
	}
	return s
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
