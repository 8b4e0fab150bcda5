package pipeline_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// TestBetweenRereadsACycleLoadsTheNewPointsAloneAndTheReReadLandsTheLatePoint
// is issue 37's steady state for one active variable: between re-reads of
// its lookback, each cycle loads its new points and nothing it loaded
// before; a late point (stamped below the mark) waits for the variable's
// next re-read, which comes within idle_recheck of the last one (at its
// phase of the period),
// whatever lastActivity means; the re-read loads the lookback again.
func TestBetweenRereadsACycleLoadsTheNewPointsAloneAndTheReReadLandsTheLatePoint(t *testing.T) {
	const (
		minute = int64(60_000)
		t0     = int64(1_700_000_000_000)
	)
	lookback, recheck := time.Hour, time.Hour
	// The first cycle, at t0+1s, re-reads; the next re-read comes when v's
	// phase of the hour next comes round, period later.
	period := pipeline.RecheckAt("v", recheck, 1, t0+1000) + recheck.Milliseconds() - (t0 + 1000)
	if period < 15*minute || period > recheck.Milliseconds() {
		t.Fatalf("v's next re-read %d ms after the first: the cycles between need at least 15 minutes", period)
	}
	for _, rd := range lastActivityReadings {
		for _, skipIdle := range []bool{false, true} {
			src := &pipelinetest.Source{}
			var mu sync.Mutex
			loaded := 0
			w := &pipelinetest.Writer{OnCommit: func(rows []pipeline.Row) error {
				mu.Lock()
				loaded += len(rows)
				mu.Unlock()
				return nil
			}}
			st := &pipelinetest.Store{}
			pt := func(ts int64) pipeline.Point { return pipeline.Point{TsMs: ts, Value: 1, Context: []byte("{}")} }
			// A point a minute for the last two hours.
			for ts := t0 - 120*minute; ts <= t0; ts += minute {
				src.Add("v", pt(ts))
			}
			newest, lastWrite := t0, t0
			cycle := func(now int64) (pipeline.Target, int) {
				t.Helper()
				mu.Lock()
				loaded = 0
				mu.Unlock()
				v := pipeline.Variable{ID: "v", DeviceID: "d", LastActivityMs: rd.la(newest, lastWrite)}
				marks, _ := st.Load(context.Background())
				targets, _ := pipeline.Plan([]pipeline.Variable{v}, marks, pipeline.PlanOptions{Lookback: lookback, Floor: t0 - 100*time.Hour.Milliseconds(), End: now, SkipIdle: skipIdle, IdleRecheck: recheck})
				if len(targets) != 1 {
					t.Fatalf("%s, skip_idle %v: cycle at %+d ms planned %d targets, want 1", rd.name, skipIdle, now-t0, len(targets))
				}
				if res := runCycle(t, src, st, w, targets, 1000); len(res.Failed) > 0 {
					t.Fatalf("cycle at %d failed: %v", now, res.Failed)
				}
				mu.Lock()
				defer mu.Unlock()
				return targets[0], loaded
			}
			// The first cycle re-reads (no re-read on record).
			now := t0 + 1000
			if tg, n := cycle(now); tg.Tail || n != 121 {
				t.Fatalf("%s, skip_idle %v: first cycle: tail %v, loaded %d; want a re-read of 121 points", rd.name, skipIdle, tg.Tail, n)
			}
			rereadAt := now
			late := t0 - 30*minute - 500 // inside the lookback, below the mark
			for now+5*minute-rereadAt < period {
				// Five new points a cycle; one late point in the second.
				for k := int64(1); k <= 5; k++ {
					newest += minute
					src.Add("v", pt(newest))
				}
				if now == rereadAt+5*minute {
					src.Add("v", pt(late))
				}
				now += 5 * minute
				lastWrite = now - 1000
				tg, n := cycle(now)
				if !tg.Tail || tg.Start != newest-5*minute+1 || n != 5 {
					t.Fatalf("%s, skip_idle %v: cycle at %+d ms between re-reads: tail %v from %+d, loaded %d; want the 5 new points alone, from %+d",
						rd.name, skipIdle, now-t0, tg.Tail, tg.Start-t0, n, newest-5*minute+1-t0)
				}
				if _, ok := w.Row("v", late); ok {
					t.Fatalf("%s, skip_idle %v: the late point landed before the re-read: a read of the new points reached below the mark", rd.name, skipIdle)
				}
			}
			// Nothing new; the recheck period has passed: the re-read
			// loads the lookback again, the late point with it.
			now = rereadAt + period
			tg, n := cycle(now)
			if tg.Tail || tg.Start > late || n < 60 {
				t.Fatalf("%s, skip_idle %v: cycle one recheck period after the last re-read: tail %v from %+d, loaded %d; want a re-read of the lookback from at most %+d",
					rd.name, skipIdle, tg.Tail, tg.Start-t0, n, late-t0)
			}
			if _, ok := w.Row("v", late); !ok {
				t.Fatalf("%s, skip_idle %v: the late point did not land with the re-read", rd.name, skipIdle)
			}
			pipelinetest.CheckLoaded(t, src, w, []string{"v"})
			if m := st.Marks()["v"]; m.RecheckedMs != now || m.CheckedMs != now {
				t.Fatalf("%s, skip_idle %v: mark after the re-read %+v; want RecheckedMs and CheckedMs at its end %d", rd.name, skipIdle, m, now)
			}
		}
	}
}

// TestAReadAfterTheMarkThatFindsNothingLeavesTheLatePointToTheReread:
// under the reading where every write moves lastActivity, a late point's
// write moves it; the read after the mark finds nothing new (what moved it
// lies at or below the mark) and records the new lastActivity, so the
// cycles after it skip the variable as idle: the point waits for the
// variable's re-read, within idle_recheck, as under the reading where a
// late point moves nothing. A re-read asked for the next cycle would land
// it sooner, at a re-read's request share each time, which a live fleet
// with late points pays in nearly every cycle (benchmark section 11).
func TestAReadAfterTheMarkThatFindsNothingLeavesTheLatePointToTheReread(t *testing.T) {
	const (
		minute = int64(60_000)
		t0     = int64(1_700_000_000_000)
	)
	lookback, recheck := time.Hour, time.Hour
	floor := t0 - 100*time.Hour.Milliseconds()
	// The first cycle, at t0+1s, re-reads; v's phase of the hour (one slot)
	// next comes round at rereadAt.
	rereadAt := pipeline.RecheckAt("v", recheck, 1, t0) + recheck.Milliseconds()
	if rereadAt-t0 < 20*minute || rereadAt-t0 > recheck.Milliseconds() {
		t.Fatalf("v's next re-read %d ms after t0: the test needs the cycles between", rereadAt-t0)
	}
	for _, everyWrite := range []bool{true, false} {
		src := &pipelinetest.Source{}
		w := &pipelinetest.Writer{}
		st := &pipelinetest.Store{}
		for ts := t0 - 120*minute; ts <= t0; ts += minute {
			src.Add("v", pipeline.Point{TsMs: ts, Value: 1, Context: []byte("{}")})
		}
		v := pipeline.Variable{ID: "v", DeviceID: "d", LastActivityMs: t0}
		// cycle runs one cycle and says what it did: "idle", "tail" or
		// "reread".
		cycle := func(now int64) string {
			t.Helper()
			marks, _ := st.Load(context.Background())
			targets, skipped := pipeline.Plan([]pipeline.Variable{v}, marks, pipeline.PlanOptions{Lookback: lookback, Floor: floor, End: now, SkipIdle: true, IdleRecheck: recheck})
			if skipped == 1 {
				return "idle"
			}
			if res := runCycle(t, src, st, w, targets, 1000); len(res.Failed) > 0 {
				t.Fatalf("cycle at %d failed: %v", now, res.Failed)
			}
			return map[bool]string{true: "tail", false: "reread"}[targets[0].Tail]
		}
		if got := cycle(t0 + 1000); got != "reread" {
			t.Fatalf("every write %v: the first cycle did a %s, want a re-read", everyWrite, got)
		}
		late := t0 - 30*minute - 500
		src.Add("v", pipeline.Point{TsMs: late, Value: 2, Context: []byte("{}")})
		if everyWrite {
			v.LastActivityMs = t0 + 2*minute
		}
		var did []string
		now := t0 + 1000
		for now+5*minute < rereadAt {
			now += 5 * minute
			did = append(did, cycle(now))
			if _, landed := w.Row("v", late); landed {
				t.Fatalf("every write %v: the late point landed at %+d ms, before the re-read, by a read after the mark (%v)", everyWrite, now-t0, did)
			}
		}
		// Under every write, one read after the mark (it found nothing and
		// recorded the lastActivity), then idle; otherwise idle throughout.
		want := "idle"
		if everyWrite {
			want = "tail"
		}
		if did[0] != want || slices.ContainsFunc(did[1:], func(d string) bool { return d != "idle" }) {
			t.Fatalf("every write %v: the cycles before the re-read did %v; want a %s, then idle", everyWrite, did, want)
		}
		if m := st.Marks()["v"]; m.RecheckedMs != t0+1000 || m.LastActivityMs != v.LastActivityMs {
			t.Fatalf("every write %v: mark %+v before the re-read; want the last re-read (%d) and lastActivity (%d) recorded", everyWrite, m, t0+1000, v.LastActivityMs)
		}
		if got := cycle(now + 5*minute); got != "reread" {
			t.Fatalf("every write %v: the cycle after v's phase came round did a %s, want a re-read", everyWrite, got)
		}
		if _, landed := w.Row("v", late); !landed {
			t.Fatalf("every write %v: the re-read did not land the late point", everyWrite)
		}
	}
}
