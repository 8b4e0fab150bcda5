package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// TestALatePointWrittenWhileACycleRunsLandsThoughTheCycleMovesTheMark is
// the loss of issue 35: a sparse reporter's mark sits at its last report
// M; a cycle reads it from M - lookback and loads a new report at M + 3h;
// after that read, before the commit, a point stamped M - 30m arrives,
// inside the lookback of the mark in force when it was written. The cycle
// commits M + 3h; the point must still land within idle_recheck plus one
// schedule period, under every reading of lastActivity.
// lastActivityReadings are the meanings the spec leaves lastActivity:
// la is a variable's lastActivity once the points up to newest (by
// timestamp) were written, the last of them at wall time now.
var lastActivityReadings = []struct {
	name string
	la   func(newest, now int64) int64
}{
	{"updated on every write", func(_, now int64) int64 { return now }},
	{"the newest point's own timestamp", func(newest, _ int64) int64 { return newest }},
	{"absent", func(int64, int64) int64 { return 0 }},
}

func TestALatePointWrittenWhileACycleRunsLandsThoughTheCycleMovesTheMark(t *testing.T) {
	const (
		hour = int64(3_600_000)
		t0   = int64(1_700_002_800_000) // an hour's start
	)
	lookback, recheck, period := time.Hour, 2*time.Hour, hour
	for _, rd := range lastActivityReadings {
		for _, skipIdle := range []bool{false, true} {
			// The source writes the armed point right after it has served
			// the first raw-series request of a cycle it is armed for: a
			// gateway delivering a late point while the cycle that has
			// just read its variable still runs.
			src := &pipelinetest.Source{}
			var mu sync.Mutex
			var armed *pipeline.Point
			src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
				err := serve(sink)
				mu.Lock()
				p := armed
				armed = nil
				mu.Unlock()
				if p != nil {
					src.Add("v", *p)
				}
				return err
			}
			pt := func(ts int64) pipeline.Point {
				return pipeline.Point{TsMs: ts, Value: float64(ts % 1000), Context: []byte("{}")}
			}
			// Reports every 2 h up to M = t0.
			for ts := t0 - 10*hour; ts <= t0; ts += 2 * hour {
				src.Add("v", pt(ts))
			}
			newest, lastWrite := t0, t0
			st := &pipelinetest.Store{}
			w := &pipelinetest.Writer{}
			cycle := func(now int64) {
				t.Helper()
				v := pipeline.Variable{ID: "v", DeviceID: "d", LastActivityMs: rd.la(newest, lastWrite)}
				marks, _ := st.Load(context.Background())
				targets, _ := pipeline.Plan([]pipeline.Variable{v}, marks, pipeline.PlanOptions{Lookback: lookback, Floor: t0 - 100*hour, End: now, SkipIdle: skipIdle, IdleRecheck: recheck})
				if res := runCycle(t, src, st, w, targets, 100); len(res.Failed) > 0 {
					t.Fatalf("cycle at %d failed: %v", now, res.Failed)
				}
			}
			cycle(t0 + 60_000)
			if m := st.Marks()["v"]; m.HwmMs != t0 {
				t.Fatalf("first cycle: mark %d, want %d", m.HwmMs, t0)
			}
			// The next report comes 3 h later (one was missed); the cycle
			// that loads it is handed a late point right after its read.
			src.Add("v", pt(t0+3*hour))
			newest, lastWrite = t0+3*hour, t0+3*hour
			late := pt(t0 - 30*60_000)
			mu.Lock()
			armed = &late
			mu.Unlock()
			now := t0 + 3*hour + 60_000
			lastWrite = now // the late point is written during this cycle
			cycle(now)
			mu.Lock()
			unwritten := armed != nil
			mu.Unlock()
			if unwritten {
				t.Fatal("the late point was never written")
			}
			if m := st.Marks()["v"]; m.HwmMs != t0+3*hour {
				t.Fatalf("the cycle committed mark %d, want %d", m.HwmMs, t0+3*hour)
			}
			// Hourly cycles for idle_recheck plus one period after the write.
			for c := now + period; c <= now+recheck.Milliseconds()+period; c += period {
				cycle(c)
			}
			if _, ok := w.Row("v", late.TsMs); !ok {
				t.Errorf("lastActivity %s, skip idle %v: the point stamped M - 30m, written while the cycle that moved the mark to M + 3h ran, never landed (mark %+v)",
					rd.name, skipIdle, st.Marks()["v"])
			}
		}
	}
}

// TestTheNextReadStartsWhereTheMarkInForceStillOwesPoints pins the window
// rule: a complete read records the lookback of the mark it was planned
// with, and the next read starts there at the latest, however far the read
// moved the mark; without a mark, from where the read started.
func TestTheNextReadStartsWhereTheMarkInForceStillOwesPoints(t *testing.T) {
	const hour = int64(3_600_000)
	lookback := time.Hour
	v := pipeline.Variable{ID: "v"}
	plan := func(marks map[string]pipeline.Mark, end int64) pipeline.Target {
		t.Helper()
		got, _ := pipeline.Plan([]pipeline.Variable{v}, marks, pipeline.PlanOptions{Lookback: lookback, Floor: 1000, End: end})
		if len(got) != 1 {
			t.Fatalf("planned %d targets, want 1", len(got))
		}
		return got[0]
	}
	// No mark: read from the floor, and a complete read owes from there.
	tg := plan(nil, 100*hour)
	if tg.Start != 1000 || tg.Reread != 1000 {
		t.Fatalf("no mark: start %d, reread %d; want both at the floor 1000", tg.Start, tg.Reread)
	}
	m, _ := pipeline.IncrementalMark(tg, pipeline.Outcome{MaxTs: 50 * hour})
	if m.RereadMs != 1000 || m.HwmMs != 50*hour {
		t.Fatalf("first mark %+v: want hwm %d, reread 1000", m, 50*hour)
	}
	// The next read starts where the first one owed, not at hwm - lookback.
	tg = plan(map[string]pipeline.Mark{"v": m}, 100*hour)
	if tg.Start != 1000 || tg.Reread != 49*hour {
		t.Fatalf("second read: start %d, reread %d; want 1000 and %d", tg.Start, tg.Reread, 49*hour)
	}
	m, _ = pipeline.IncrementalMark(tg, pipeline.Outcome{MaxTs: 90 * hour})
	tg = plan(map[string]pipeline.Mark{"v": m}, 100*hour)
	if tg.Start != 49*hour || tg.From != 49*hour || tg.Reread != 89*hour {
		t.Fatalf("third read: start %d, from %d, reread %d; want %d, %d, %d", tg.Start, tg.From, tg.Reread, 49*hour, 49*hour, 89*hour)
	}
	// A mark written before RereadMs existed reads from its lookback.
	tg = plan(map[string]pipeline.Mark{"v": {VariableID: "v", HwmMs: 90 * hour}}, 100*hour)
	if tg.Start != 89*hour {
		t.Fatalf("legacy mark: start %d, want %d", tg.Start, 89*hour)
	}
	// A backfill that read what the mark in force owes pays it, and owes
	// what a re-read planned with that mark would: from its lookback.
	bf := pipeline.BackfillMark(1000, lookback.Milliseconds())
	held := pipeline.Mark{VariableID: "v", HwmMs: 90 * hour, RereadMs: 80 * hour, CheckedMs: 95 * hour}
	got, ok := bf(pipeline.Target{Variable: v, Start: 70 * hour, End: 99 * hour, Mark: held, HasMark: true}, pipeline.Outcome{MaxTs: 99 * hour})
	if !ok || got.HwmMs != 99*hour || got.RereadMs != 89*hour || got.CheckedMs != 95*hour {
		t.Fatalf("backfill mark %+v (ok %v): want hwm %d, reread %d, checked %d", got, ok, 99*hour, 89*hour, 95*hour)
	}
	// One that started above the debt leaves the mark alone: the mark it
	// would commit keeps a debt a cycle beside it may have paid, and the
	// next cycle would read below a watermark that cycle published.
	if got, ok := bf(pipeline.Target{Variable: v, Start: 85 * hour, End: 99 * hour, Mark: held, HasMark: true}, pipeline.Outcome{MaxTs: 99 * hour}); ok {
		t.Fatalf("a backfill from above the debt committed %+v, want no mark", got)
	}
	got, ok = bf(pipeline.Target{Variable: v, Start: 70 * hour, End: 99 * hour, Mark: pipeline.Mark{VariableID: "v", HwmMs: 90 * hour}, HasMark: true}, pipeline.Outcome{MaxTs: 99 * hour})
	if !ok || got.RereadMs != 89*hour {
		t.Fatalf("backfill over a legacy mark %+v (ok %v): want reread %d", got, ok, 89*hour)
	}
	got, ok = bf(pipeline.Target{Variable: v, Start: 500, End: 99 * hour}, pipeline.Outcome{MaxTs: 99 * hour})
	if !ok || got.RereadMs != 500 {
		t.Fatalf("backfill from the floor without a mark %+v (ok %v): want reread 500", got, ok)
	}
}
