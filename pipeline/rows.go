package pipeline

import (
	"fmt"
	"slices"
)

// frameSink appends decoded rows to the fetcher's chunk, notes the frames
// the limit may have cut (see density.go) and hands full chunks to the
// loaders at frame boundaries.
type frameSink struct {
	r     *reader
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
	// frame describes the current frame as served; served sums the rows
	// of every frame.
	frame  frameStats
	served int64
	cut    []cutFrame
	// frameTs holds the timestamps of the current frame, for the proof
	// of a cut frame (density.go).
	frameTs []int64
	// frameLoaded counts the current frame's rows in spans so far.
	frameLoaded int
	// reached is set once any part of the response reached the sink.
	reached bool
}

// A chunk is handed to the loaders once it holds maxChunkRows rows or
// maxChunkBytes bytes (Batch.Bytes), whichever comes first. The bytes
// bound is what keeps memory independent of the rows' size: a chunk's
// strings (the context, mostly) live in it until it is loaded, and the
// writer's buffers grow to a chunk's bytes, so with rows bounded alone,
// contexts 5 times larger made the chunks in flight 5 times larger (issue
// 26). A pass has some ten chunks in flight (a fetcher's each, the
// loaders' queue, one in each INSERT), and as many of the writer's
// buffers: 2 MiB (~17k of fleetsim's ~120-byte rows) keeps them to a few
// tens of MiB, and loaded the 5 M backfill as fast as 32k rows did. The
// rows bound only matters for rows under 64 bytes.
const (
	maxChunkRows  = 32 << 10
	maxChunkBytes = 2 << 20
)

// full says whether the chunk is due to be handed on.
func full(b *Batch) bool { return b.Len() >= maxChunkRows || b.Bytes >= maxChunkBytes }

func (s *frameSink) Point(i int, p Point) error {
	s.reached = true
	if i < 0 || i >= len(s.req.targets) {
		return fmt.Errorf("frame %d of a request for %d variables", i, len(s.req.targets))
	}
	t := s.req.targets[i]
	s.frame.add(p.TsMs)
	s.frameTs = append(s.frameTs, p.TsMs)
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
	ctx := "{}"
	if len(p.Context) > 2 {
		ctx = string(p.Context)
	}
	if s.chunk.Len() == s.frameStart || p.TsMs < s.frameMin {
		s.frameMin = p.TsMs
	}
	s.chunk.Append(Row{VariableID: v.ID, DeviceID: v.DeviceID, DeviceLabel: v.DeviceLabel, VariableLabel: v.Label,
		TsMs: p.TsMs, Value: p.Value, Context: ctx, Lat: p.Lat, Lng: p.Lng, HasLat: p.HasLat, HasLng: p.HasLng})
	if p.TsMs > s.frameMax {
		s.frameMax = p.TsMs
	}
	if full(s.chunk) {
		// A long frame does not wait for its end in the chunk: the chunk,
		// hence the memory, stays within maxChunkRows and maxChunkBytes
		// whatever the limit, the response size and the rows' size. Its
		// rows so far become a span of their own.
		s.r.mu.Lock()
		s.closeSpan(t)
		s.r.mu.Unlock()
		s.frameMax = 0
		s.nextChunk()
	}
	return nil
}

// closeSpan ends the span of the current frame's rows in the chunk, which
// holds t until they are acknowledged. Caller holds s.r.mu.
func (s *frameSink) closeSpan(t *targetState) {
	n := s.chunk.Len() - s.frameStart
	if n <= 0 {
		return
	}
	s.chunk.Spans = append(s.chunk.Spans, Span{VariableID: t.Variable.ID, Rows: n, MinTsMs: s.frameMin, MaxTsMs: s.frameMax})
	t.spans++
	s.frameLoaded += n
}

// nextChunk hands the chunk to the loaders and starts an empty one.
func (s *frameSink) nextChunk() {
	s.r.out.send(s.chunk)
	s.chunk = s.r.out.get()
	s.reqStart, s.reqBytes, s.reqSpans = 0, 0, 0
	s.frameStart, s.frameBytes = 0, 0
}

func (s *frameSink) EndFrame(i int, rows int) error {
	s.reached = true
	if i < 0 || i >= len(s.req.targets) {
		return fmt.Errorf("frame %d of a request for %d variables", i, len(s.req.targets))
	}
	t := s.req.targets[i]
	// A closed window of one millisecond is complete however many rows it
	// returned: the table keeps one point per variable and timestamp.
	whole := s.req.start == s.req.end && !s.req.open
	s.served += int64(rows)
	// A frame the limit may have cut is loaded all the same (its rows are
	// real points); what it leaves unread is decided once the request is
	// over (density.go). The point ahead it showed is noted, cut or not:
	// it exists, so the first cycle that ends after it must read the
	// variable, and an earlier one among the rows a cut lost is found by
	// the re-reads of its window, or bounded where they stop (split.go).
	cut := s.limit > 0 && rows >= s.limit && !whole
	s.r.mu.Lock()
	s.closeSpan(t)
	t.futureMs = earliest(t.futureMs, s.frameFuture)
	if cut {
		st := s.frame
		st.loaded = s.frameLoaded
		slices.Sort(s.frameTs)
		s.cut = append(s.cut, cutFrame{t: t, stats: st, count: -1, ts: s.frameTs})
		s.frameTs = nil
	} else {
		s.frameTs = s.frameTs[:0]
	}
	s.r.mu.Unlock()
	s.frameMax, s.frameFuture, s.frame, s.frameLoaded = 0, 0, frameStats{}, 0
	if full(s.chunk) {
		s.nextChunk()
	}
	s.frameStart, s.frameBytes = s.chunk.Len(), s.chunk.Bytes
	return nil
}

// queue is the work list of requests. Splits add work while fetchers run, so
