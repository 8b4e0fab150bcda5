package pipeline

import (
	"context"
	"time"
)

// handoff passes a chunk to the loaders. Each of its spans holds its target
// from the moment the span is added until the chunk is acknowledged.
func (p *pass) handoff(chunk *Batch) {
	if chunk.Len() == 0 {
		chunk.Reset()
		p.pool.Put(chunk)
		return
	}
	p.chunks <- chunk
}

// loader loads the chunks it is handed: each chunk is appended to the open
// INSERT and recycled at once, keeping only its spans until the INSERT is
// committed, so BatchRows sizes the INSERT without costing memory.
func (p *pass) loader(ctx context.Context) {
	o := p.e.opts
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
		p.ackSpans(spans, err)
		ins, spans, rows, size = nil, spans[:0], 0, 0
	}
	commit := func() {
		if ins != nil {
			settle(ins.Commit())
		}
	}
	add := func(c *Batch) {
		defer func() { c.Reset(); p.pool.Put(c) }()
		if down != nil {
			p.ackSpans(c.Spans, down)
			return
		}
		if ins == nil {
			// Loads finish even when the run is cancelled: these rows were
			// fetched, and committing them is what makes a restart cheap.
			var err error
			if ins, err = p.e.w.Begin(context.WithoutCancel(ctx)); err != nil {
				down = err
				p.ackSpans(c.Spans, down)
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
		case c, ok := <-p.chunks:
			if !ok {
				commit()
				return
			}
			add(c)
		case <-timer.C:
			commit()
			timer.Reset(o.BatchAge)
		}
	}
}
