package pipeline

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// memRollup records the ranges it is asked to recompute, and which of
// their variables already had a mark committed at that moment.
type memRollup struct {
	mu             sync.Mutex
	st             *memStore
	touched        map[string]Touched
	markedTooEarly []string
	fail           error
}

func (r *memRollup) Recompute(_ context.Context, touched []Touched) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	marks, _ := r.st.Load(context.Background())
	for _, t := range touched {
		if _, ok := marks[t.VariableID]; ok {
			r.markedTooEarly = append(r.markedTooEarly, t.VariableID)
		}
		if old, ok := r.touched[t.VariableID]; ok {
			t.FromMs, t.ToMs = min(t.FromMs, old.FromMs), max(t.ToMs, old.ToMs)
		}
		r.touched[t.VariableID] = t
	}
	return r.fail
}

func TestEngineRecomputesTheRangesItLoadedBeforeCommittingTheirMarks(t *testing.T) {
	src, targets := fixture(9, 700, 1_700_000_000_000)
	w := &memWriter{rows: map[string]map[int64]Row{}}
	st := &memStore{marks: map[string]Mark{}}
	ru := &memRollup{st: st, touched: map[string]Touched{}}
	// Frames cut by the limit and small inserts: many spans per variable.
	e := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 128, VariablesPerRequest: 4, BatchRows: 300, Rollup: ru}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 || res.CommitErr != nil {
		t.Fatalf("failed=%v commit=%v", res.Failed, res.CommitErr)
	}
	if len(ru.markedTooEarly) > 0 {
		t.Errorf("marks of %v were committed before their rollups were recomputed", ru.markedTooEarly)
	}
	for _, tg := range targets {
		pts := src.points[tg.Variable.ID]
		// The fixture's first point lies above its window's start.
		want := Touched{VariableID: tg.Variable.ID, FromMs: tg.From, ToMs: pts[len(pts)-1].TsMs, Loaded: true}
		if got := ru.touched[tg.Variable.ID]; got != want {
			t.Errorf("recomputed %+v, want the loaded range widened to the window's start %+v", got, want)
		}
		if _, ok := st.marks[tg.Variable.ID]; !ok {
			t.Errorf("no mark committed for %s", tg.Variable.ID)
		}
	}
}

func TestEngineLeavesTheMarksWhenTheRollupFails(t *testing.T) {
	src, targets := fixture(3, 50, 1_700_000_000_000)
	w := &memWriter{rows: map[string]map[int64]Row{}}
	st := &memStore{marks: map[string]Mark{"v000": {VariableID: "v000", HwmMs: 5}}}
	boom := errors.New("clickhouse refused the rollup")
	ru := &memRollup{st: &memStore{marks: map[string]Mark{}}, touched: map[string]Touched{}, fail: boom}
	res := NewEngine(src, w, st, EngineOptions{Rollup: ru}, nil, nil, nil).Run(context.Background(), targets)
	if !errors.Is(res.CommitErr, boom) {
		t.Errorf("CommitErr = %v, want the rollup's failure", res.CommitErr)
	}
	if len(st.marks) != 1 || st.marks["v000"].HwmMs != 5 {
		t.Errorf("marks moved although their rollups failed: %+v", st.marks)
	}
	if len(ru.touched) != 3 {
		t.Errorf("rollup asked for %d variables, want 3", len(ru.touched))
	}
}

// A pass that loaded points from an older retention floor and stopped
// before its commit left them in the warehouse; once the floor has moved
// past them no pass reads them again. The hook is handed the range from
// where the window would start without the floor, whether or not this pass
// loaded anything, and knows whether its end is a loaded point.
func TestTheHookIsHandedWhatTheFloorCutOffTheWindow(t *testing.T) {
	const floor = 1_700_000_000_000
	src := &memSource{points: map[string][]Point{
		"loads": {{TsMs: floor + 10, Value: 1}, {TsMs: floor + 20, Value: 2}},
	}, failOnce: map[string]error{}, rng: rand.New(rand.NewPCG(1, 2))}
	targets := []Target{
		{Variable: Variable{ID: "loads"}, Start: floor, End: floor + 1000, From: noMark},
		{Variable: Variable{ID: "silent"}, Start: floor, End: floor + 1000, From: floor - 5000},
		{Variable: Variable{ID: "unclamped"}, Start: floor, End: floor + 1000, From: floor},
	}
	st := &memStore{marks: map[string]Mark{}}
	ru := &memRollup{st: st, touched: map[string]Touched{}}
	res := NewEngine(src, &memWriter{rows: map[string]map[int64]Row{}}, st, EngineOptions{Rollup: ru}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 || res.CommitErr != nil {
		t.Fatalf("failed=%v commit=%v", res.Failed, res.CommitErr)
	}
	for id, want := range map[string]Touched{
		"loads":  {VariableID: "loads", FromMs: noMark, ToMs: floor + 20, Loaded: true},
		"silent": {VariableID: "silent", FromMs: floor - 5000, ToMs: floor - 1},
	} {
		if got := ru.touched[id]; got != want {
			t.Errorf("%s: handed %+v, want %+v", id, got, want)
		}
	}
	if got, ok := ru.touched["unclamped"]; ok {
		t.Errorf("a window the floor did not cut, with nothing loaded, was handed to the hook: %+v", got)
	}
}

// Issue 24, case 4: a first sync loads points just inside the retention
// window and stops before its rollup (here the hook fails, so no mark is
// written); by the next cycle the floor has moved past them, so it never
// reads them again. The next cycle hands the hook a range that covers
// them, both when it loads newer points of the variable and when it loads
// nothing.
//
// A backfill that gives a variable its first mark takes over what the
// next cycle would have handed the hook: once its mark stands, cycles
// hand only the mark's lookback, so nothing else would recompute those
// hours (found by the simulation, seed 21550857777).
func TestAStoppedFirstSyncsPointsBelowTheNextFloorAreHandedToTheHook(t *testing.T) {
	const minute = int64(60_000)
	retention := 24 * time.Hour
	now := time.UnixMilli(1_750_000_000_000)
	floor0 := now.UnixMilli() - retention.Milliseconds()
	pt := func(ts int64) Point { return Point{TsMs: ts, Value: 1, Context: []byte("{}")} }
	for _, next := range []string{"cycle", "backfill"} {
		t.Run("the next pass a "+next, func(t *testing.T) {
			mem := &memSource{points: map[string][]Point{
				"newer":  {pt(floor0 + minute), pt(floor0 + 2*minute), pt(now.UnixMilli() - minute)},
				"silent": {pt(floor0 + minute), pt(floor0 + 2*minute)},
			}}
			st := &memStore{marks: map[string]Mark{}}
			w := &memWriter{rows: map[string]map[int64]Row{}}
			ru := &memRollup{st: &memStore{marks: map[string]Mark{}}, touched: map[string]Touched{}, fail: errors.New("rollup failed")}
			clock := now
			s := NewSyncer(listingSource{mem}, w, Stages{}, st, SyncOptions{
				Engine:    EngineOptions{RetryWait: time.Millisecond, Rollup: ru},
				Retention: retention, Lookback: time.Hour, Now: func() time.Time { return clock },
			}, nil, nil)
			if _, err := s.Cycle(context.Background()); err == nil {
				t.Fatal("the first cycle succeeded although its rollup failed")
			}
			if len(st.marks) != 0 || len(w.rows["silent"]) != 2 {
				t.Fatalf("after the failed rollup: marks %v, %d points of silent stored; want none, 2", st.marks, len(w.rows["silent"]))
			}
			// The service drops what fell out of its window.
			clock = now.Add(5 * time.Minute)
			for id, pts := range mem.points {
				mem.points[id] = slices.DeleteFunc(pts, func(p Point) bool { return p.TsMs < clock.UnixMilli()-retention.Milliseconds() })
			}
			ru.fail, ru.touched = nil, map[string]Touched{}
			var err error
			if next == "cycle" {
				_, err = s.Cycle(context.Background())
			} else {
				// From the new floor, as `fleetsync backfill` without
				// --from starts: it gives "newer" its first mark.
				_, err = s.Backfill(context.Background(), s.Floor(clock), clock.UnixMilli(), nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := st.marks["newer"]; !ok {
				t.Fatalf("the %s gave newer no mark", next)
			}
			for _, id := range []string{"newer", "silent"} {
				got, ok := ru.touched[id]
				for ts := range w.rows[id] {
					if !ok || ts < got.FromMs || ts > got.ToMs {
						t.Errorf("%s: its point at floor%+d ms is stored, and the hook was handed %+v (handed: %v)", id, ts-floor0, got, ok)
					}
				}
			}
		})
	}
}
