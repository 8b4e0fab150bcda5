package pipeline

import (
	"fmt"
)

// frameSink appends decoded rows to the fetcher's chunk, drops frames cut by
// the limit and hands full chunks to the loaders at frame boundaries.
type frameSink struct {
	p     *pass
	req   *request
	chunk *Batch
	limit int

	// reqStart, reqBytes and reqSpans mark where this request's rows begin
	// in the current chunk, so a failed request can be discarded.
	reqStart, reqBytes, reqSpans int
	frameStart, frameBytes       int
	frameMin, frameMax           int64
	// frameFuture is the earliest timestamp after the target's end in the
	// current frame (0 when none).
	frameFuture int64
	cut         []*targetState
	// touched is set once any part of the response reached the sink.
	touched bool
}

const maxChunkRows = 32 << 10

func (s *frameSink) Point(i int, p Point) error {
	s.touched = true
	if i < 0 || i >= len(s.req.targets) {
		return fmt.Errorf("frame %d of a request for %d variables", i, len(s.req.targets))
	}
	t := s.req.targets[i]
	if p.TsMs < t.start {
		return nil // already loaded by an earlier cycle; the request reached back for a neighbour
	}
	if p.TsMs > t.end {
		// Stamped after the cycle's end: a later cycle loads it, once its
		// time has come, so the mark never runs ahead of the clock.
		s.frameFuture = earliest(s.frameFuture, p.TsMs)
		return nil
	}
	v := &t.Variable
	lat, lng, hasLat, hasLng := LatLng(p.Context)
	ctx := "{}"
	if len(p.Context) > 2 {
		ctx = string(p.Context)
	}
	if s.chunk.Len() == s.frameStart || p.TsMs < s.frameMin {
		s.frameMin = p.TsMs
	}
	s.chunk.Append(Row{VariableID: v.ID, DeviceID: v.DeviceID, DeviceLabel: v.DeviceLabel, VariableLabel: v.Label,
		TsMs: p.TsMs, Value: p.Value, Context: ctx, Lat: lat, Lng: lng, HasLat: hasLat, HasLng: hasLng})
	if p.TsMs > s.frameMax {
		s.frameMax = p.TsMs
	}
	return nil
}

func (s *frameSink) EndFrame(i int, rows int) error {
	s.touched = true
	if i < 0 || i >= len(s.req.targets) {
		return fmt.Errorf("frame %d of a request for %d variables", i, len(s.req.targets))
	}
	t := s.req.targets[i]
	b := s.chunk
	// A closed window of one millisecond is complete however many rows it
	// returned: the table keeps one point per variable and timestamp.
	whole := s.req.start == s.req.end && !s.req.open
	if s.limit > 0 && rows >= s.limit && !whole {
		b.Truncate(s.frameStart)
		b.Bytes = s.frameBytes
		s.cut = append(s.cut, t)
	} else {
		s.p.mu.Lock()
		t.futureMs = earliest(t.futureMs, s.frameFuture)
		if n := b.Len() - s.frameStart; n > 0 {
			b.Spans = append(b.Spans, Span{VariableID: t.Variable.ID, Rows: n, MinTsMs: s.frameMin, MaxTsMs: s.frameMax})
			t.pending++
		}
		s.p.mu.Unlock()
	}
	s.frameMax, s.frameFuture = 0, 0
	if b.Len() >= maxChunkRows {
		s.p.handoff(b)
		b = s.p.pool.Get().(*Batch)
		b.Reset()
		s.chunk = b
		s.reqStart, s.reqBytes, s.reqSpans = 0, 0, 0
	}
	s.frameStart, s.frameBytes = b.Len(), b.Bytes
	return nil
}

// queue is the work list of requests. Splits add work while fetchers run, so
