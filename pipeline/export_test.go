package pipeline

import "context"

// What the simulation (package pipeline_test, so that it can compose the
// commit chain from links outside this package, as cmd does) needs of
// the package's internals.

// FloorResolution is floorResolution: how finely the engine locates a
// retention floor it runs into.
const FloorResolution = floorResolution

// MarksOfMap is StateStore.MarksOf over a map of every mark, for the
// tests' stores.
func MarksOfMap(marks map[string]Mark, ids []string, fn func(Mark) error) error {
	for _, id := range ids {
		if m, ok := marks[id]; ok {
			if err := fn(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// NoMark is noMark: a target's From when it had no mark.
const NoMark = noMark

// MaxChunkRows is maxChunkRows: the most rows a chunk holds.
const MaxChunkRows = maxChunkRows

// Reading is what a reader did when run alone (ReadAlone): the reader on
// its own, for pipeline_test's tests of splitting, proofs and the floor.
type Reading struct {
	// Rows are the timestamps of the rows handed on, by variable, in
	// the order handed on.
	Rows map[string][]int64
	// Reloaded is the rows each variable noted as loaded again.
	Reloaded map[string]int64
	// Requests, Splits and Counts are the raw-series requests, the splits
	// and the count requests the reader made; Probes the requests that
	// located the retention floor.
	Requests, Splits, Counts, Probes int64
	// VarCap is the most variables a request names (0: no cap).
	VarCap int64
	// FloorMovedTo is where the floor moved to (0: it did not move).
	FloorMovedTo int64
	// Told is the window start the committer was told, by variable.
	Told map[string]int64
	// Points and Done are what the committer holds of each variable: the
	// points acknowledged, and whether the target is done.
	Points map[string]int64
	Done   map[string]bool
	// Result is the committer's result.
	Result RunResult
}

// ReadAlone runs a reader over targets from floor under ctx, with a drain
// in place of the loaders that takes each chunk's rows (handing the chunk
// to onChunk first, unless nil) and acknowledges its spans to the
// committer at once, and returns what it did.
func ReadAlone(ctx context.Context, src Source, targets []Target, o EngineOptions, floor int64, onChunk func(*Batch)) *Reading {
	e := NewEngine(src, nil, nil, o, nil, nil, nil)
	c := newCommitter(e, targets)
	out := newChunks(1)
	r := newReader(ctx, e, targets, floor, out, c)
	d := &Reading{Rows: map[string][]int64{}, Reloaded: map[string]int64{}, Told: map[string]int64{}, Points: map[string]int64{}, Done: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range out.full {
			for i := range b.Len() {
				d.Rows[b.VariableID[i]] = append(d.Rows[b.VariableID[i]], b.TsMs[i])
			}
			if onChunk != nil {
				onChunk(b)
			}
			c.ack(b.Spans, nil)
			out.recycle(b)
		}
	}()
	r.run(ctx)
	<-done
	for id, ts := range r.byID {
		d.Reloaded[id] = ts.reloaded
	}
	d.Requests, d.Splits, d.Counts = r.n.requests.Load(), r.n.splits.Load(), r.proofs.asked.Load()
	d.Probes, d.VarCap, d.FloorMovedTo = r.floor.probes.Load(), r.varCap.Load(), r.floor.movedTo()
	c.mu.Lock()
	for id, h := range c.held {
		d.Told[id] = h.told.start
	}
	c.mu.Unlock()
	for _, t := range targets {
		d.Points[t.Variable.ID], d.Done[t.Variable.ID] = c.loaded(t.Variable.ID)
	}
	c.result(&d.Result)
	return d
}

// MaxChunkBytes is maxChunkBytes: the bytes past which a chunk is handed
// on.
const MaxChunkBytes = maxChunkBytes

// TestCommitter is a committer driven by hand, for pipeline_test's tests of
// its rules (holds, acknowledgements, the commit) with no reader, loader
// or source: each method is the committer's own.
type TestCommitter struct{ c *committer }

// NewTestCommitter is the committer of a run of e over targets.
func NewTestCommitter(e *Engine, targets []Target) TestCommitter {
	return TestCommitter{newCommitter(e, targets)}
}

// Ack acknowledges spans, loaded or failed with err.
func (t TestCommitter) Ack(spans []Span, err error) { t.c.ack(spans, err) }

// ReadEnded is the reader's last word on target id: its window read from
// start, the earliest point seen past its end, and its spans.
func (t TestCommitter) ReadEnded(id string, start, futureMs int64, spans int) {
	t.c.readEnded(readEnd{id: id, start: start, futureMs: futureMs, spans: spans})
}

// Fail fails target id with err.
func (t TestCommitter) Fail(id string, err error) { t.c.fail(id, err) }

// Commit hands the settled targets to the chain and the marks.
func (t TestCommitter) Commit(ctx context.Context, final bool) { t.c.commit(ctx, final) }

// Run commits every second until stop is closed, then once more.
func (t TestCommitter) Run(ctx context.Context, stop <-chan struct{}) { t.c.run(ctx, stop) }

// Loaded is the points acknowledged of target id, and whether it is done.
func (t TestCommitter) Loaded(id string) (points int64, done bool) { return t.c.loaded(id) }

// Result is the run's result as the committer has it.
func (t TestCommitter) Result() RunResult {
	var res RunResult
	t.c.result(&res)
	return res
}
