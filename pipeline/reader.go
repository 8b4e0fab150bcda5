package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The reader is the first half of a pass: it reads the targets' windows
// from the Source into chunks for the loaders, and tells the committer
// (committer.go) when it is done with a target. Everything it decides
// about reading lives with it or in the file of its concept: the request
// queue (queue.go), frames to rows (rows.go), the proofs of cut frames
// (density.go) and the re-reads they leave (split.go), the retention floor
// (floor.go). It never learns whether a row was loaded: the loaders
// acknowledge that to the committer.

// targetState is one target as the reader works on it: the window still
// to read, the reads of it queued or running, and what its frames showed.
// Its fields below Target are guarded by the reader's mu, but for start,
// which only a request holding a read of the target moves (to the floor).
type targetState struct {
	Target
	start, end int64
	// reads is the requests queued or running that read the target; the
	// committer hears of it once the last one ended.
	reads int
	// spans is the spans of its rows the reader handed, or is about to
	// hand, to the loaders: each holds the target's mark until the
	// committer has its acknowledgement.
	spans int
	// futureMs is the earliest timestamp after end seen in a complete
	// frame, or a lower bound of it (0 when none).
	futureMs int64
	// reloaded is the rows loaded from cut frames whose windows are read
	// again: the committer's points count them twice.
	reloaded int64
}

// reader works the request queue of one pass with MaxInFlight fetchers.
type reader struct {
	e      *Engine
	c      *committer
	q      *queue
	out    *chunks
	floor  *retentionFloor
	proofs *prover
	mu     sync.Mutex
	byID   map[string]*targetState
	n      readCounts
	// varCap, once positive, is the most variables a request of the pass
	// names: set when both halves of a request split for a response too
	// large were too large as well (shrink).
	varCap atomic.Int64
}

// readCounts are the reader's figures for the RunResult: raw-series
// requests, requests split because the limit cut a frame, and the rows the
// source served in all frames.
type readCounts struct {
	requests, splits, served atomic.Int64
}

// newReader queues the reads of targets (one each, unique ids) from floor
// on, to be handed to out, and reported to c.
func newReader(ctx context.Context, e *Engine, targets []Target, floor int64, out *chunks, c *committer) *reader {
	r := &reader{e: e, c: c, q: newQueue(ctx), out: out, floor: newRetentionFloor(e, floor),
		proofs: newProver(e), byID: make(map[string]*targetState, len(targets))}
	states := make([]*targetState, len(targets))
	for i, t := range targets {
		states[i] = &targetState{Target: t, start: t.Start, end: t.End, reads: 1}
		r.byID[t.Variable.ID] = states[i]
	}
	for _, req := range Group(states, e.opts.VariablesPerRequest) {
		r.q.push(req)
	}
	r.q.doneAdding()
	return r
}

// run works the queue until it is empty or ctx is cancelled, then closes
// the loaders' input.
func (r *reader) run(ctx context.Context) {
	var fetchers sync.WaitGroup
	for i := range r.e.opts.MaxInFlight {
		fetchers.Add(1)
		ctx := r.e.named(ctx, "fetcher", i)
		go func() { defer fetchers.Done(); turn(ctx); r.fetcher(ctx) }()
	}
	fetchers.Wait()
	turn(ctx)
	// A cancelled run leaves requests queued. Their targets end failed, as
	// those whose request the cancellation cut: the rows they loaded before
	// are in the warehouse, so they are handed down the chain like every
	// other target (the analyst tables are owed them), and their marks stay.
	for _, req := range r.q.drain() {
		r.failRequest(req, context.Cause(ctx))
	}
	r.out.close()
}

// fetcher works the queue: it runs one request at a time into its chunk
// and hands the chunk to the loaders when full or old.
func (r *reader) fetcher(ctx context.Context) {
	chunk := r.out.get()
	var since time.Time
	for {
		req := r.q.pop(ctx)
		if req == nil {
			break
		}
		if chunk.Len() == 0 {
			since = time.Now()
		}
		chunk = r.fetch(ctx, req, chunk)
		r.q.done()
		// Rows do not wait in a fetcher's chunk longer than BatchAge: with
		// a slow source the chunk would otherwise fill for minutes, and no
		// insert, hence no mark, would happen until it is full.
		if chunk.Len() > 0 && time.Since(since) >= r.e.opts.BatchAge {
			r.out.send(chunk)
			chunk = r.out.get()
		}
	}
	r.out.send(chunk)
}

// fetch runs one request and returns the chunk to keep appending to.
func (r *reader) fetch(ctx context.Context, req *request, chunk *Batch) *Batch {
	if err := ctx.Err(); err != nil {
		r.failRequest(req, context.Cause(ctx))
		return chunk
	}
	if c := int(r.varCap.Load()); c > 0 && len(req.targets) > c {
		r.replace(req, splitVariables(req, c, nil))
		return chunk
	}
	floor := r.floor.at.Load()
	if req.start < floor {
		req.start = floor
		for _, t := range req.targets {
			t.start = max(t.start, floor)
		}
	}
	if req.start > req.end {
		r.finishRequest(req, nil)
		return chunk
	}
	ids := make([]string, len(req.targets))
	for i, t := range req.targets {
		ids[i] = t.Variable.ID
	}
	sink := &frameSink{r: r, req: req, chunk: chunk, limit: r.e.opts.RowsPerRequest,
		reqStart: chunk.Len(), reqBytes: chunk.Bytes, reqSpans: len(chunk.Spans),
		frameStart: chunk.Len(), frameBytes: chunk.Bytes}
	r.n.requests.Add(1)
	err := r.e.src.Series(ctx, SeriesRequest{VariableIDs: ids, Start: req.start, End: req.seriesEnd(), Limit: r.e.opts.RowsPerRequest}, sink)
	chunk = sink.chunk
	r.n.served.Add(sink.served)
	if err != nil {
		// Frames of this request not yet handed off are discarded; the whole
		// request is read again or fails.
		chunk.Truncate(sink.reqStart)
		chunk.Bytes = sink.reqBytes
		r.mu.Lock()
		for _, sp := range chunk.Spans[sink.reqSpans:] {
			r.byID[sp.VariableID].spans--
		}
		r.mu.Unlock()
		chunk.Spans = chunk.Spans[:sink.reqSpans]
		r.retryOrFail(ctx, req, err, sink.reached)
		return chunk
	}
	left, _ := r.proofs.prove(ctx, req, sink.cut)
	r.finishRequest(req, left)
	return chunk
}

// retryOrFail decides what a failed request becomes. The source retries
// failures that happen before its response reaches the sink, within its own
// budget; the engine re-issues only requests whose response failed after it
// started (reached), which the source cannot retry without the caller
// discarding what it already received.
func (r *reader) retryOrFail(ctx context.Context, req *request, err error, reached bool) {
	switch {
	case ctx.Err() != nil:
		r.failRequest(req, context.Cause(ctx))
	case IsRetention(err):
		if perr := r.floor.move(ctx, req.targets[0].Variable.ID, req.start, req.end, err); perr != nil {
			r.failRequest(req, perr)
			return
		}
		r.q.push(req)
	case !reached && IsTooLarge(err) && r.shrink(req, err):
	case r.confine(req, err):
	case reached && IsRetryable(err) && req.attempt+1 < r.e.opts.RequestAttempts:
		req.attempt++
		r.e.log.Warn("raw series request failed, retrying", zap.Int("variables", len(req.targets)),
			zap.String("from", msTime(req.start)), zap.String("to", msTime(req.end)), zap.Int("attempt", req.attempt), zap.Error(err))
		r.e.m.requestRetries.Inc()
		if req.backoff == nil {
			req.backoff = r.e.opts.rereadPolicy().NewBackOff()
		}
		t := time.NewTimer(req.backoff.NextBackOff())
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		turn(ctx)
		r.q.push(req)
	default:
		r.failRequest(req, err)
	}
}

// confine keeps a failure that one variable may have caused with that
// variable, so that one bad variable does not fail up to
// VariablesPerRequest others every cycle. When the source ties the failure
// to one variable (a frame it could not decode, a rejection naming it),
// that variable fails and the others are asked for again without it. When
// it only says a variable may have caused it (a 404 for a variable deleted
// since the walk, a 400, a 403 on one device), the request is split in
// halves until the failure is confined. It returns false, and does
// nothing, for a failure of the whole request or of a single variable.
func (r *reader) confine(req *request, err error) bool {
	if len(req.targets) < 2 {
		return false
	}
	var parts [][]*targetState
	var ve VariableError
	if errors.As(err, &ve) && ve.VariableIndex() >= 0 && ve.VariableIndex() < len(req.targets) {
		i := ve.VariableIndex()
		r.c.fail(req.targets[i].Variable.ID, err)
		parts = [][]*targetState{append(append([]*targetState(nil), req.targets[:i]...), req.targets[i+1:]...)}
	} else if IsNotFound(err) || IsScoped(err) {
		half := len(req.targets) / 2
		parts = [][]*targetState{req.targets[:half:half], req.targets[half:]}
	} else {
		return false
	}
	next := make([]*request, len(parts))
	for i, part := range parts {
		next[i] = &request{targets: part, start: req.start, end: req.end, open: req.open}
	}
	r.mu.Lock()
	ended := r.replaceLocked(req, next)
	r.mu.Unlock()
	for _, n := range next {
		r.q.push(n)
	}
	r.report(ended)
	return true
}

// shrink reads the window of a request whose response was too large
// (TooLargeError) in smaller requests: its variables in halves; a request
// of one variable that reaches into the future (open) closed at its end,
// the future noted as the halves of a cut frame do (split.go), since no
// halving of the window shrinks what lies past it; a closed request of one
// variable in halves of its window. Once both halves of a request were too
// large as well, no request of the pass names more variables than half of
// theirs (varCap), so that the rest of the pass does not send responses
// only to drop them; one half alone, which one dense variable makes too
// large, lowers nothing. What the source holds of a response is then
// bounded by its own bound, not by the response's size, which grows with
// the rows'. It returns false for one variable over one millisecond,
// which cannot be asked for in less (the source holds such a response
// whole, see fleetapi's heldBound).
func (r *reader) shrink(req *request, err error) bool {
	var next []*request
	switch n := len(req.targets); {
	case n > 1:
		half := (n + 1) / 2
		if req.halves != nil && req.halves.tooLarge.Add(1) == 2 {
			// Lowered under mu, so that it only goes down; fetch reads
			// it without the lock.
			r.mu.Lock()
			lower := r.varCap.Load() == 0 || int64(half) < r.varCap.Load()
			if lower {
				r.varCap.Store(int64(half))
			}
			r.mu.Unlock()
			if lower {
				r.e.log.Info("raw series responses too large to hold; reading fewer variables per request",
					zap.Int("variables_per_request", half), zap.Error(err))
			}
		}
		next = splitVariables(req, half, &splitHalves{})
	case req.open:
		r.mu.Lock()
		t := req.targets[0]
		t.futureMs = earliest(t.futureMs, req.end+1)
		r.mu.Unlock()
		next = []*request{{targets: req.targets, start: req.start, end: req.end}}
	case req.start < req.end:
		mid := req.start + (req.end-req.start)/2
		next = []*request{{targets: req.targets, start: req.start, end: mid}, {targets: req.targets, start: mid + 1, end: req.end}}
	default:
		return false
	}
	r.replace(req, next)
	return true
}

// splitHalves counts how many of the two halves of a request split for a
// response too large were too large themselves.
type splitHalves struct{ tooLarge atomic.Int32 }

// splitVariables is req's window read for its variables in requests of at
// most c of them; halves, when not nil, is shared by them (two at most).
func splitVariables(req *request, c int, halves *splitHalves) []*request {
	var next []*request
	for lo := 0; lo < len(req.targets); lo += c {
		hi := min(lo+c, len(req.targets))
		next = append(next, &request{targets: req.targets[lo:hi:hi], start: req.start, end: req.end, open: req.open, halves: halves})
	}
	return next
}

// replace queues next, in front of the others, in place of req, which
// read nothing.
func (r *reader) replace(req *request, next []*request) {
	r.mu.Lock()
	ended := r.replaceLocked(req, next)
	r.mu.Unlock()
	for i := len(next) - 1; i >= 0; i-- {
		r.q.pushFront(next[i])
	}
	r.report(ended)
}

// failRequest fails every target of req with err (the committer keeps each
// target's first failure) and ends req's reads.
func (r *reader) failRequest(req *request, err error) {
	for _, t := range req.targets {
		r.c.fail(t.Variable.ID, err)
	}
	r.mu.Lock()
	ended := r.replaceLocked(req, nil)
	r.mu.Unlock()
	r.report(ended)
}

// finishRequest ends a request that was served: it notes what the proofs
// of its cut frames left (those not proven whole; see density.go) and
// queues the re-reads they leave (split.go), then ends req's reads.
func (r *reader) finishRequest(req *request, left []cutFrame) {
	r.mu.Lock()
	noteProofs(left)
	var next []*request
	if len(left) > 0 {
		next = rereads(req, left, r.e.opts.RowsPerRequest)
		r.n.splits.Add(1)
	}
	ended := r.replaceLocked(req, next)
	r.mu.Unlock()
	// The re-reads go to the front of the queue: finishing the variables
	// already started before starting others lets their marks be
	// committed as the run goes, so a run stopped midway (SIGTERM, a
	// crash) keeps that progress. Their reads were counted before req's
	// ended, so that no target ends in between.
	for i := len(next) - 1; i >= 0; i-- {
		r.q.pushFront(next[i])
	}
	r.report(ended)
}

// replaceLocked counts the reads of next and ends req's read of each of
// its targets, returning, in req's order, what the reader tells the
// committer of those whose last read it was. Caller holds r.mu.
func (r *reader) replaceLocked(req *request, next []*request) []readEnd {
	for _, n := range next {
		for _, t := range n.targets {
			t.reads++
		}
	}
	var ended []readEnd
	for _, t := range req.targets {
		t.reads--
		if t.reads == 0 {
			ended = append(ended, readEnd{id: t.Variable.ID, start: t.start, futureMs: t.futureMs, spans: t.spans})
		}
	}
	return ended
}

// report hands the committer the targets whose reads ended. No request
// reads them any more, so nothing the reader does changes what it said.
func (r *reader) report(ended []readEnd) {
	for _, end := range ended {
		r.c.readEnded(end)
	}
}
