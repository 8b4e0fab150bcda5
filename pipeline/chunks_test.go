package pipeline_test

import (
	"context"
	"sync"
	"testing"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

func TestEngineChunksStayBoundedWhateverTheFrameSize(t *testing.T) {
	// Frames of 3 chunks each, uncut: a chunk that waited for its frame's
	// end would hold a whole frame.
	const points = 3*pipeline.MaxChunkRows + 123
	src, targets := pipelinetest.Fixture(2, points, 1_700_000_000_000)
	// The writer records the largest chunk the loaders appended.
	var mu sync.Mutex
	largest := 0
	w := &pipelinetest.Writer{OnAppend: func(c *pipeline.Batch) error {
		mu.Lock()
		largest = max(largest, c.Len())
		mu.Unlock()
		return nil
	}}
	st := &pipelinetest.Store{}
	res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 4 * pipeline.MaxChunkRows, VariablesPerRequest: 2, BatchRows: pipeline.MaxChunkRows}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	pipelinetest.CheckLoaded(t, src, w, targetIDs(targets))
	if largest > pipeline.MaxChunkRows {
		t.Fatalf("a chunk of %d rows reached the writer, want at most %d", largest, pipeline.MaxChunkRows)
	}
	for _, id := range targetIDs(targets) {
		pts := src.Points(id)
		if got, want := st.Marks()[id].HwmMs, lastTs(pts); got != want {
			t.Errorf("mark of %s = %d, want %d", id, got, want)
		}
	}
}
