package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// servedRecorder records, per variable, the oldest row the source served.
type servedRecorder struct {
	*memSource
	mu     sync.Mutex
	oldest map[string]int64
}

func (s *servedRecorder) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	return s.memSource.Series(ctx, req, &recordingSink{FrameSink: sink, s: s, ids: req.VariableIDs})
}

type recordingSink struct {
	FrameSink
	s   *servedRecorder
	ids []string
}

func (r *recordingSink) Point(i int, p Point) error {
	r.s.mu.Lock()
	if o, ok := r.s.oldest[r.ids[i]]; !ok || p.TsMs < o {
		r.s.oldest[r.ids[i]] = p.TsMs
	}
	r.s.mu.Unlock()
	return r.FrameSink.Point(i, p)
}

// TestAVariableWithoutPointsDoesNotWidenItsNeighboursWindows: one variable
// with no points (no mark: read from the retention floor) shares a cycle
// with 49 active ones with long histories; the cycle serves no row older
// than each variable's own window (its mark's lookback, widened by less
// than an eighth of the window to share a request), so it reads the 49
// lookbacks, not the 49 histories.
func TestAVariableWithoutPointsDoesNotWidenItsNeighboursWindows(t *testing.T) {
	const (
		hour = int64(3_600_000)
		now  = int64(1_700_000_000_000)
	)
	floor := now - 30*24*hour
	src := &servedRecorder{memSource: &memSource{points: map[string][]Point{}, failOnce: map[string]error{}, rng: rand.New(rand.NewPCG(1, 2))}, oldest: map[string]int64{}}
	vars := []Variable{{ID: "empty", DeviceID: "d"}}
	marks := map[string]Mark{}
	for i := range 49 {
		id := fmt.Sprintf("active%02d", i)
		vars = append(vars, Variable{ID: id, DeviceID: "d", LastActivityMs: now})
		for ts := floor + int64(i); ts < now; ts += 10 * 60_000 {
			src.points[id] = append(src.points[id], Point{TsMs: ts, Value: 1, Context: []byte("{}")})
		}
		hwm := src.points[id][len(src.points[id])-1].TsMs
		marks[id] = Mark{VariableID: id, HwmMs: hwm, RereadMs: hwm - hour, CheckedMs: now - 5*60_000}
	}
	targets, _ := Plan(vars, marks, PlanOptions{Lookback: time.Hour, Floor: floor, End: now})
	st := &memStore{marks: marks}
	w := &memWriter{rows: map[string]map[int64]Row{}}
	if res := runCycle(t, src, st, w, targets, 10_000); len(res.Failed) > 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	served := 0
	for id, oldest := range src.oldest {
		m := marks[id]
		own := m.HwmMs - hour
		if oldest <= own-(now-own)/8 {
			t.Errorf("%s was served a row at %d h before now, its own window starts %d h before now", id, (now-oldest)/hour, (now-own)/hour)
		}
		for _, p := range src.points[id] {
			if p.TsMs >= oldest {
				served++
			}
		}
	}
	if served > 49*10 {
		t.Errorf("served %d rows for 49 active variables reporting every 10 min with a 1 h lookback (want at most %d)", served, 49*10)
	}
}
