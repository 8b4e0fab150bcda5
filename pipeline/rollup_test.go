package pipeline

import (
	"context"
	"errors"
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

// halvesRollup records each Recompute call's variables. When meet is set,
// a call returns only once two calls have started, so calls made one after
// the other fail instead of passing by luck.
type halvesRollup struct {
	st    *memStore
	meet  bool
	fail  map[string]error // by the first variable of a call
	mu    sync.Mutex
	calls [][]string
	early []string
	both  chan struct{} // closed when the second call starts
}

func (r *halvesRollup) Recompute(_ context.Context, touched []Touched) error {
	ids := make([]string, len(touched))
	for i, t := range touched {
		ids[i] = t.VariableID
	}
	marks, _ := r.st.Load(context.Background())
	r.mu.Lock()
	r.calls = append(r.calls, ids)
	for _, id := range ids {
		if _, ok := marks[id]; ok {
			r.early = append(r.early, id)
		}
	}
	if r.meet && len(r.calls) == 2 {
		close(r.both)
	}
	r.mu.Unlock()
	if r.meet {
		select {
		case <-r.both:
		case <-time.After(10 * time.Second):
			return errors.New("the other half never started beside this one")
		}
	}
	return r.fail[ids[0]]
}

// The last commit of a pass, after the loads, hands a large set of loaded
// hours to the Rollup as two halves by variable id, side by side, and
// commits the marks only after both; a small one, or any commit while the
// loads run, goes in one call.
func TestLastCommitRecomputesLargeSetsInTwoHalvesSideBySide(t *testing.T) {
	ids := []string{"v07", "v03", "v11", "v01", "v09", "v05", "v02"}
	run := func(t *testing.T, last bool, hours int, ru *halvesRollup) (*pass, *memStore) {
		t.Helper()
		st := &memStore{marks: map[string]Mark{}}
		ru.st = st
		p := &pass{e: NewEngine(nil, nil, st, EngineOptions{Rollup: ru}, nil, nil, nil)}
		for _, id := range ids {
			p.touched = append(p.touched, Touched{VariableID: id, Agg: &Aggregates{Hours: make([]HourAgg, 1)}})
			p.ready = append(p.ready, Mark{VariableID: id, HwmMs: 1})
		}
		p.heldHours = hours
		p.commit(context.Background(), last)
		return p, st
	}

	t.Run("large, last", func(t *testing.T) {
		ru := &halvesRollup{meet: true, both: make(chan struct{})}
		p, st := run(t, true, splitHours, ru)
		if p.commitErr != nil {
			t.Fatal(p.commitErr)
		}
		if len(ru.calls) != 2 {
			t.Fatalf("%d calls %v, want two halves", len(ru.calls), ru.calls)
		}
		low, high := ru.calls[0], ru.calls[1]
		if low[0] > high[0] {
			low, high = high, low
		}
		if want := []string{"v01", "v02", "v03"}; !slices.Equal(low, want) {
			t.Errorf("low half %v, want %v", low, want)
		}
		if want := []string{"v05", "v07", "v09", "v11"}; !slices.Equal(high, want) {
			t.Errorf("high half %v, want %v", high, want)
		}
		if len(ru.early) > 0 || len(st.marks) != len(ids) {
			t.Errorf("marks of %v committed before their rollups; %d marks committed, want %d", ru.early, len(st.marks), len(ids))
		}
	})

	t.Run("large, last, one half fails", func(t *testing.T) {
		boom := errors.New("clickhouse refused the rollup")
		ru := &halvesRollup{meet: true, both: make(chan struct{}), fail: map[string]error{"v05": boom}}
		p, st := run(t, true, splitHours, ru)
		if !errors.Is(p.commitErr, boom) {
			t.Errorf("commit error %v, want the half's failure", p.commitErr)
		}
		if len(st.marks) != 0 {
			t.Errorf("%d marks committed although a half of their rollups failed", len(st.marks))
		}
	})

	for _, c := range []struct {
		name  string
		last  bool
		hours int
	}{{"small, last", true, splitHours - 1}, {"large, while loading", false, 10 * splitHours}} {
		t.Run(c.name, func(t *testing.T) {
			ru := &halvesRollup{}
			run(t, c.last, c.hours, ru)
			if len(ru.calls) != 1 || len(ru.calls[0]) != len(ids) {
				t.Errorf("calls %v, want one with all %d variables", ru.calls, len(ids))
			}
		})
	}
}

// SideBySide keeps both failures, on one line, and runs the two together.
func TestSideBySideJoinsBothFailuresOnOneLine(t *testing.T) {
	a, b := errors.New("hourly refused"), errors.New("latest refused")
	started := make(chan struct{})
	err := SideBySide(func() error { <-started; return a }, func() error { close(started); return b })
	if !errors.Is(err, a) || !errors.Is(err, b) || err.Error() != "hourly refused; latest refused" {
		t.Errorf("got %q, want both failures, a's first, on one line", err)
	}
	if err := SideBySide(func() error { return nil }, func() error { return b }); err != b {
		t.Errorf("got %v, want b's failure alone", err)
	}
	if err := SideBySide(func() error { return a }, func() error { return nil }); err != a {
		t.Errorf("got %v, want a's failure alone", err)
	}
	if err := SideBySide(func() error { return nil }, func() error { return nil }); err != nil {
		t.Errorf("got %v, want nil", err)
	}
}
