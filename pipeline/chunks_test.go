package pipeline

import (
	"context"
	"sync"
	"testing"
)

// sizeWriter records the largest chunk the loaders appended.
type sizeWriter struct {
	*memWriter
	mu      sync.Mutex
	largest int
}

type sizeInsert struct {
	Insert
	w *sizeWriter
}

func (w *sizeWriter) Begin(ctx context.Context) (Insert, error) {
	in, err := w.memWriter.Begin(ctx)
	return &sizeInsert{Insert: in, w: w}, err
}

func (in *sizeInsert) Append(c *Batch) error {
	in.w.mu.Lock()
	in.w.largest = max(in.w.largest, c.Len())
	in.w.mu.Unlock()
	return in.Insert.Append(c)
}

func TestEngineChunksStayBoundedWhateverTheFrameSize(t *testing.T) {
	// Frames of 3 chunks each, uncut: a chunk that waited for its frame's
	// end would hold a whole frame.
	const points = 3*maxChunkRows + 123
	src, targets := fixture(2, points, 1_700_000_000_000)
	w := &sizeWriter{memWriter: &memWriter{rows: map[string]map[int64]Row{}}}
	st := &memStore{marks: map[string]Mark{}}
	res := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 4 * maxChunkRows, VariablesPerRequest: 2, BatchRows: maxChunkRows}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	checkLoaded(t, src, w.memWriter, ids(targets))
	if w.largest > maxChunkRows {
		t.Fatalf("a chunk of %d rows reached the writer, want at most %d", w.largest, maxChunkRows)
	}
	for _, id := range ids(targets) {
		pts := src.points[id]
		if got, want := st.marks[id].HwmMs, pts[len(pts)-1].TsMs; got != want {
			t.Errorf("mark of %s = %d, want %d", id, got, want)
		}
	}
}
