package pipeline

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
)

// targetState is one target as a pass works on it: the window still to
// read, the holds on it (requests and unacknowledged spans), and what its
// loaded rows showed.
type targetState struct {
	Target
	start, end int64
	pending    int
	// minTs and maxTs bound the timestamps of its acknowledged rows
	// (minTs is valid when points > 0).
	minTs, maxTs int64
	// futureMs is the earliest timestamp after end seen in a complete
	// frame, or a lower bound of it (0 when none).
	futureMs int64
	points   int64
	// reloaded is the rows loaded from cut frames whose windows are read
	// again: points counts them twice.
	reloaded int64
	err      error
}

// request is one raw-series request over [start, end]. An open request
// reaches futureHorizon past end: the rows beyond end are not loaded, only
// noted (targetState.futureMs).
type request struct {
	targets []*targetState
	start   int64
	end     int64
	open    bool
	attempt int
	// backoff spaces the re-reads of a response that failed mid-stream.
	backoff backoff.BackOff
}

// seriesEnd is the end the request sends.
func (q *request) seriesEnd() int64 {
	if q.open {
		return q.end + futureHorizon.Milliseconds()
	}
	return q.end
}

// fetcher works the queue: it runs one request at a time into its chunk
// and hands the chunk to the loaders when full or old.
func (p *pass) fetcher(ctx context.Context) {
	chunk := p.pool.Get().(*Batch)
	chunk.Reset()
	var since time.Time
	for {
		req := p.q.pop()
		if req == nil {
			break
		}
		if chunk.Len() == 0 {
			since = time.Now()
		}
		chunk = p.fetch(ctx, req, chunk)
		p.q.done()
		// Rows do not wait in a fetcher's chunk longer than BatchAge: with
		// a slow source the chunk would otherwise fill for minutes, and no
		// insert, hence no mark, would happen until it is full.
		if chunk.Len() > 0 && time.Since(since) >= p.e.opts.BatchAge {
			p.handoff(chunk)
			chunk = p.pool.Get().(*Batch)
			chunk.Reset()
		}
	}
	p.handoff(chunk)
}

// fetch runs one request and returns the chunk to keep appending to.
func (p *pass) fetch(ctx context.Context, req *request, chunk *Batch) *Batch {
	if err := ctx.Err(); err != nil {
		p.failRequest(req, context.Cause(ctx))
		return chunk
	}
	floor := p.floor.Load()
	if req.start < floor {
		req.start = floor
		for _, t := range req.targets {
			t.start = max(t.start, floor)
		}
	}
	if req.start > req.end {
		p.finishRequest(req, nil)
		return chunk
	}
	ids := make([]string, len(req.targets))
	for i, t := range req.targets {
		ids[i] = t.Variable.ID
	}
	sink := &frameSink{p: p, req: req, chunk: chunk, limit: p.e.opts.RowsPerRequest,
		reqStart: chunk.Len(), reqBytes: chunk.Bytes, reqSpans: len(chunk.Spans),
		frameStart: chunk.Len(), frameBytes: chunk.Bytes}
	p.requests.Add(1)
	err := p.e.src.Series(ctx, SeriesRequest{VariableIDs: ids, Start: req.start, End: req.seriesEnd(), Limit: p.e.opts.RowsPerRequest}, sink)
	chunk = sink.chunk
	p.served.Add(sink.served)
	if err != nil {
		// Frames of this request not yet handed off are discarded; the whole
		// request is read again or fails.
		chunk.Truncate(sink.reqStart)
		chunk.Bytes = sink.reqBytes
		p.mu.Lock()
		for _, sp := range chunk.Spans[sink.reqSpans:] {
			p.releaseLocked(p.byID[sp.VariableID])
		}
		p.mu.Unlock()
		chunk.Spans = chunk.Spans[:sink.reqSpans]
		p.retryOrFail(ctx, req, err, sink.touched)
		return chunk
	}
	p.finishRequest(req, p.proveWhole(ctx, req, sink.cut))
	return chunk
}

// retryOrFail decides what a failed request becomes. The source retries
// failures that happen before its response reaches the sink, within its own
// budget; the engine re-issues only requests whose response failed after it
// started (touched), which the source cannot retry without the caller
// discarding what it already received.
func (p *pass) retryOrFail(ctx context.Context, req *request, err error, touched bool) {
	switch {
	case ctx.Err() != nil:
		p.failRequest(req, context.Cause(ctx))
	case IsRetention(err):
		if perr := p.moveFloor(ctx, req, err); perr != nil {
			p.failRequest(req, perr)
			return
		}
		p.q.push(req)
	case p.confine(req, err):
	case touched && IsRetryable(err) && req.attempt+1 < p.e.opts.RequestAttempts:
		req.attempt++
		p.e.log.Warn("raw series request failed, retrying", zap.Int("variables", len(req.targets)),
			zap.String("from", msTime(req.start)), zap.String("to", msTime(req.end)), zap.Int("attempt", req.attempt), zap.Error(err))
		p.e.m.requestRetries.Inc()
		if req.backoff == nil {
			req.backoff = p.e.opts.rereadPolicy().NewBackOff()
		}
		t := time.NewTimer(req.backoff.NextBackOff())
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		p.q.push(req)
	default:
		p.failRequest(req, err)
	}
}

// moveFloor reacts to a 403003: the account's window is shorter than
// configured (or the service's clock is ahead of ours). It searches the
// service's real floor with probes of one millisecond (see findFloor) and
// moves the floor to it plus FloorMargin, so that nothing the service still
// holds is skipped and the search costs a few dozen requests, not one per
// hour of the gap. Points before the new floor are out of reach; that is
