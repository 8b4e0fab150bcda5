package pipeline_test

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// recordingSink notes, per variable, the oldest row served through it.
type recordingSink struct {
	pipeline.FrameSink
	mu     *sync.Mutex
	oldest map[string]int64
	ids    []string
}

func (r *recordingSink) Point(i int, p pipeline.Point) error {
	r.mu.Lock()
	if o, ok := r.oldest[r.ids[i]]; !ok || p.TsMs < o {
		r.oldest[r.ids[i]] = p.TsMs
	}
	r.mu.Unlock()
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
	// The source records, per variable, the oldest row it served.
	src := &pipelinetest.Source{}
	var mu sync.Mutex
	oldest := map[string]int64{}
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
		return serve(&recordingSink{FrameSink: sink, mu: &mu, oldest: oldest, ids: req.VariableIDs})
	}
	vars := []pipeline.Variable{{ID: "empty", DeviceID: "d"}}
	marks := map[string]pipeline.Mark{}
	for i := range 49 {
		id := fmt.Sprintf("active%02d", i)
		vars = append(vars, pipeline.Variable{ID: id, DeviceID: "d", LastActivityMs: now})
		var pts []pipeline.Point
		for ts := floor + int64(i); ts < now; ts += 10 * 60_000 {
			pts = append(pts, pipeline.Point{TsMs: ts, Value: 1, Context: []byte("{}")})
		}
		src.Add(id, pts...)
		hwm := lastTs(src.Points(id))
		marks[id] = pipeline.Mark{VariableID: id, HwmMs: hwm, RereadMs: hwm - hour, CheckedMs: now - 5*60_000}
	}
	targets, _ := pipeline.Plan(vars, marks, pipeline.PlanOptions{Lookback: time.Hour, Floor: floor, End: now})
	st := pipelinetest.NewStore(slices.Collect(maps.Values(marks))...)
	w := &pipelinetest.Writer{}
	if res := runCycle(t, src, st, w, targets, 10_000); len(res.Failed) > 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	served := 0
	for id, oldest := range oldest {
		m := marks[id]
		own := m.HwmMs - hour
		if oldest <= own-(now-own)/8 {
			t.Errorf("%s was served a row at %d h before now, its own window starts %d h before now", id, (now-oldest)/hour, (now-own)/hour)
		}
		for _, p := range src.Points(id) {
			if p.TsMs >= oldest {
				served++
			}
		}
	}
	if served > 49*10 {
		t.Errorf("served %d rows for 49 active variables reporting every 10 min with a 1 h lookback (want at most %d)", served, 49*10)
	}
}
