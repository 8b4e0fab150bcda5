package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
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
		want := Touched{VariableID: tg.Variable.ID, FromMs: pts[0].TsMs, ToMs: pts[len(pts)-1].TsMs}
		if got := ru.touched[tg.Variable.ID]; got.VariableID != want.VariableID || got.FromMs != want.FromMs || got.ToMs != want.ToMs {
			t.Errorf("recomputed %+v, want the loaded range %+v", got, want)
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
