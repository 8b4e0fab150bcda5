package pipeline

import (
	"context"
	"sync"
	"time"
)

// chunks carries the reader's filled chunks to the loaders, and back to a
// pool once they are appended to an INSERT, so that a pass allocates only
// the chunks in flight.
type chunks struct {
	full chan *Batch
	pool sync.Pool
}

// newChunks is a channel of chunks with room for n.
func newChunks(n int) *chunks {
	c := &chunks{full: make(chan *Batch, n)}
	c.pool.New = func() any { return new(Batch) }
	return c
}

// get returns an empty chunk.
func (c *chunks) get() *Batch {
	b := c.pool.Get().(*Batch)
	b.Reset()
	return b
}

// send passes b to the loaders; an empty one goes back to the pool. Each
// of b's spans holds its target from the moment the span is added until
// the loaders acknowledge it.
func (c *chunks) send(b *Batch) {
	if b.Len() == 0 {
		c.recycle(b)
		return
	}
	c.full <- b
}

// recycle returns a chunk whose rows are no longer needed to the pool.
func (c *chunks) recycle(b *Batch) {
	b.Reset()
	c.pool.Put(b)
}

// close tells the loaders that no chunk follows.
func (c *chunks) close() { close(c.full) }

// load loads the chunks it is handed: each chunk is appended to the open
// INSERT and recycled at once, keeping only its spans until the INSERT is
// committed, so BatchRows sizes the INSERT without costing memory. Once an
// INSERT is committed or failed, ack is told of its spans.
func load(ctx context.Context, w Writer, o EngineOptions, in *chunks, ack func(spans []Span, err error)) {
	var (
		ins   Insert
		spans []Span
		rows  int
		size  int
		// down is set once Begin has spent the writer's retry budget: the
		// rest of the run's chunks fail at once instead of each waiting out
		// the budget again.
		down error
	)
	timer := time.NewTimer(o.BatchAge)
	defer timer.Stop()
	settle := func(err error) {
		ack(spans, err)
		ins, spans, rows, size = nil, spans[:0], 0, 0
	}
	commit := func() {
		if ins != nil {
			settle(ins.Commit())
		}
	}
	add := func(c *Batch) {
		defer in.recycle(c)
		if down != nil {
			ack(c.Spans, down)
			return
		}
		if ins == nil {
			// Loads finish even when the run is cancelled: these rows were
			// fetched, and committing them is what makes a restart cheap.
			var err error
			if ins, err = w.Begin(context.WithoutCancel(ctx)); err != nil {
				down = err
				ack(c.Spans, down)
				return
			}
			timer.Reset(o.BatchAge)
		}
		spans = append(spans, c.Spans...)
		rows += c.Len()
		size += c.Bytes
		if err := ins.Append(c); err != nil {
			ins.Abort()
			settle(err)
			return
		}
		if rows >= o.BatchRows || size >= o.BatchBytes {
			commit()
		}
	}
	for {
		select {
		case c, ok := <-in.full:
			turn(ctx)
			if !ok {
				commit()
				return
			}
			add(c)
		case <-timer.C:
			turn(ctx)
			commit()
			timer.Reset(o.BatchAge)
		}
	}
}
