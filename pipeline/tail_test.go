package pipeline_test

import (
	"context"
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

// TestAReadAfterTheMarkThatFindsNothingThoughLastActivityMovedAsksForAReRead:
// under the reading where every write moves lastActivity, a late point's
// write moves it; the read after the mark finds nothing new, so what moved
// it lies at or below the mark. The variable stays lagging (its old
// lastActivity is kept) and the next cycle re-reads it, which lands the
// point. Where lastActivity is the newest point's timestamp, a late point
// does not move it, and the point waits for the periodic re-read.
func TestAReadAfterTheMarkThatFindsNothingThoughLastActivityMovedAsksForAReRead(t *testing.T) {
	const (
		minute = int64(60_000)
		t0     = int64(1_700_000_000_000)
	)
	lookback, recheck := time.Hour, time.Hour
	floor := t0 - 100*time.Hour.Milliseconds()
	for _, everyWrite := range []bool{true, false} {
		src := &pipelinetest.Source{}
		w := &pipelinetest.Writer{}
		st := &pipelinetest.Store{}
		for ts := t0 - 120*minute; ts <= t0; ts += minute {
			src.Add("v", pipeline.Point{TsMs: ts, Value: 1, Context: []byte("{}")})
		}
		v := pipeline.Variable{ID: "v", DeviceID: "d", LastActivityMs: t0}
		// cycle runs one cycle and returns its target, Tail set to say it
		// was skipped as idle when it planned none.
		cycle := func(now int64) pipeline.Target {
			t.Helper()
			marks, _ := st.Load(context.Background())
			targets, skipped := pipeline.Plan([]pipeline.Variable{v}, marks, pipeline.PlanOptions{Lookback: lookback, Floor: floor, End: now, SkipIdle: true, IdleRecheck: recheck})
			if skipped == 1 {
				return pipeline.Target{Tail: true}
			}
			if res := runCycle(t, src, st, w, targets, 1000); len(res.Failed) > 0 {
				t.Fatalf("cycle at %d failed: %v", now, res.Failed)
			}
			return targets[0]
		}
		lag := func(now int64) time.Duration {
			return pipeline.Lag([]pipeline.Variable{v}, st.Marks(), floor, now)[0].Lag
		}
		cycle(t0 + 1000)
		late := t0 - 30*minute
		src.Add("v", pipeline.Point{TsMs: late - 500, Value: 2, Context: []byte("{}")})
		if everyWrite {
			v.LastActivityMs = t0 + 2*minute
		}
		if tg := cycle(t0 + 5*minute); !tg.Tail {
			t.Fatalf("every write %v: the cycle after the late write re-read; want a read after the mark, or none (the last re-read is 5 min old)", everyWrite)
		}
		m := st.Marks()["v"]
		switch {
		case everyWrite && (m.RecheckedMs != 1 || lag(t0+6*minute) == 0):
			t.Fatalf("every write: a read after the mark found nothing though lastActivity moved: mark %+v, lag %v; want a re-read asked (RecheckedMs 1) and the variable lagging", m, lag(t0+6*minute))
		case !everyWrite && m.RecheckedMs != t0+1000:
			t.Fatalf("newest timestamp: mark %+v; want the last re-read kept (%d): nothing says a point is missing", m, t0+1000)
		}
		tg := cycle(t0 + 10*minute)
		_, landed := w.Row("v", late-500)
		if everyWrite && (tg.Tail || !landed || lag(t0+11*minute) != 0) {
			t.Fatalf("every write: the cycle after the empty read: tail %v, late point landed %v, lag %v; want the re-read to land it and the lag to clear", tg.Tail, landed, lag(t0+11*minute))
		}
		if !everyWrite && landed {
			t.Fatalf("newest timestamp: the late point landed before the re-read, with nothing to say it existed")
		}
	}
}
