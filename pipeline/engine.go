package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// EngineOptions size the moving parts of one run.
type EngineOptions struct {
	// RowsPerRequest is the raw-series limit per variable.
	RowsPerRequest int
	// VariablesPerRequest packs this many variables into one raw-series POST.
	VariablesPerRequest int
	// MaxInFlight is the number of concurrent API requests.
	MaxInFlight int
	// BatchRows, BatchBytes and BatchAge decide when an INSERT is sent.
	BatchRows  int
	BatchBytes int
	BatchAge   time.Duration
	// InsertWorkers is the number of concurrent INSERTs (connections).
	InsertWorkers int
	// RequestAttempts bounds how often one raw-series request is tried when
	// it fails after its response started (a body cut mid-stream); failures
	// before the response are retried by the Source itself.
	RequestAttempts int
	// RetryWait is the pause before such a re-try.
	RetryWait time.Duration
	// Progress, when set, counts the points acknowledged by ClickHouse as
	// they are, for a progress line on long backfills.
	Progress *atomic.Int64
	// Floor is the earliest timestamp (POSIX ms) requests may reach; it
	// moves forward when the service rejects a range as past its retention.
	Floor int64
	// FloorMargin is kept between the service's real retention floor, once
	// a rejection made the engine search for it, and the floor it moves to,
	// so that requests are not rejected again as the service's floor
	// advances with time (default 1m).
	FloorMargin time.Duration
}

func (o *EngineOptions) defaults() {
	if o.RowsPerRequest <= 0 {
		o.RowsPerRequest = 10000
	}
	if o.VariablesPerRequest <= 0 {
		o.VariablesPerRequest = 50
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 4
	}
	if o.BatchRows <= 0 {
		o.BatchRows = 1000000
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 128 << 20
	}
	if o.BatchAge <= 0 {
		o.BatchAge = 5 * time.Second
	}
	if o.InsertWorkers <= 0 {
		o.InsertWorkers = 2
	}
	if o.RequestAttempts <= 0 {
		o.RequestAttempts = 5
	}
	if o.RetryWait <= 0 {
		o.RetryWait = 500 * time.Millisecond
	}
	if o.FloorMargin <= 0 {
		o.FloorMargin = time.Minute
	}
}

// RetryableError is implemented by errors that a later attempt may not
// repeat (network failures, 5xx, 429, bodies cut mid-stream). The source's
// error types implement it; the pipeline decides by type, never by text.
type RetryableError interface {
	error
	Retryable() bool
}

// RetentionError is implemented by the source's error for a range that
// reaches past the account's retention window (code 403003).
type RetentionError interface {
	error
	RetentionExceeded() bool
}

// NotFoundError is implemented by the source's error for an object the
// service does not know (404): a device or variable deleted since the
// metadata walk listed it.
type NotFoundError interface {
	error
	NotFound() bool
}

// IsNotFound reports whether err says the object asked for does not exist.
func IsNotFound(err error) bool {
	var r NotFoundError
	return errors.As(err, &r) && r.NotFound()
}

// IsRetryable reports whether err says a retry may succeed.
func IsRetryable(err error) bool {
	var r RetryableError
	return errors.As(err, &r) && r.Retryable()
}

// IsScoped reports whether err says one of the request's variables may have
// caused it (see ScopedError).
func IsScoped(err error) bool {
	var s ScopedError
	return errors.As(err, &s) && s.VariableScoped()
}

// IsRetention reports whether err is a retention-window rejection.
func IsRetention(err error) bool {
	var r RetentionError
	return errors.As(err, &r) && r.RetentionExceeded()
}

// TargetError is the failure of one variable in a run.
type TargetError struct {
	Variable Variable
	Start    int64
	End      int64
	Err      error
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("variable %s/%s (%s) window %s..%s: %v", e.Variable.DeviceLabel, e.Variable.Label,
		e.Variable.ID, msTime(e.Start), msTime(e.End), e.Err)
}

func (e *TargetError) Unwrap() error { return e.Err }

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// RunResult sums up one engine run.
type RunResult struct {
	Targets   int
	Completed int
	Points    int64
	Requests  int64
	Splits    int64
	Failed    []*TargetError
	// FloorMovedTo is the retention floor after the run when the service
	// made it move forward; zero otherwise.
	FloorMovedTo int64
	// CommitErr is the error of committing marks, if any.
	CommitErr error
}

// Outcome is what a completed target's read found.
type Outcome struct {
	// MaxTs is the greatest timestamp loaded (0 when none).
	MaxTs int64
	// FutureMs is the earliest timestamp seen after the target's End, or a
	// lower bound of it when a frame cut by the limit hid it (0 when none).
	// Such points are left for the cycle that ends after them.
	FutureMs int64
}

// MarkFunc decides the mark committed for a completed target. ok false
// commits nothing.
type MarkFunc func(t Target, o Outcome) (m Mark, ok bool)

// IncrementalMark is the MarkFunc of a sync cycle: the mark moves to the
// greatest loaded timestamp, never backwards, and records what the read
// covered: its end (CheckedMs), the earliest point it saw beyond that end,
// and the lastActivity the walk saw before it. A lastActivity past the read's
// end is not recorded (the previous one is kept): it may stand for a point
// the read stopped short of, and recording it would let the next cycle skip
// the variable.
func IncrementalMark(t Target, o Outcome) (Mark, bool) {
	la := t.Variable.LastActivityMs
	if la > t.End {
		la = t.Mark.LastActivityMs
	}
	return Mark{
		VariableID:     t.Variable.ID,
		HwmMs:          max(t.Mark.HwmMs, o.MaxTs),
		LastActivityMs: la,
		CheckedMs:      t.End,
		FutureMs:       o.FutureMs,
		UpdatedAt:      time.Now().UTC(),
	}, true
}

// futureHorizon is how far past a cycle's end its requests reach, to see
// points stamped ahead of time. The spec's closed range makes an explicit
// end the reading every implementation agrees on; a century is past any
// clock error yet far inside every timestamp type.
const futureHorizon = 100 * 365 * 24 * time.Hour

// Engine moves the points of a set of targets from a Source to a Writer and
// commits their marks.
type Engine struct {
	src    Source
	w      Writer
	st     StateStore
	log    *zap.Logger
	m      *Metrics
	opts   EngineOptions
	markFn MarkFunc
}

// NewEngine wires an engine. metrics and logger may be nil.
func NewEngine(src Source, w Writer, st StateStore, opts EngineOptions, markFn MarkFunc, logger *zap.Logger, m *Metrics) *Engine {
	opts.defaults()
	if logger == nil {
		logger = zap.NewNop()
	}
	if markFn == nil {
		markFn = IncrementalMark
	}
	return &Engine{src: src, w: w, st: st, log: logger, m: m, opts: opts, markFn: markFn}
}

type targetState struct {
	Target
	start, end int64
	pending    int
	maxTs      int64
	// futureMs is the earliest timestamp after end seen in a complete
	// frame, or a lower bound of it (0 when none).
	futureMs int64
	points   int64
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
}

// seriesEnd is the end the request sends.
func (q *request) seriesEnd() int64 {
	if q.open {
		return q.end + futureHorizon.Milliseconds()
	}
	return q.end
}

// run is the state of one Engine.Run.
type run struct {
	e       *Engine
	ctx     context.Context
	byID    map[string]*targetState
	q       *queue
	chunks  chan *Batch
	pool    sync.Pool
	floor   atomic.Int64
	floorMu sync.Mutex
	moved   bool

	mu        sync.Mutex
	commitErr error
	ready     []Mark
	failed    []*TargetError
	complete  int
	points    atomic.Int64
	requests  atomic.Int64
	splits    atomic.Int64
}

// loadPasses bounds how often a run reads again the targets whose rows
// ClickHouse lost mid-INSERT (a streamed INSERT cannot be resent, so its
// rows are read from the source anew).
const loadPasses = 3

// LoadError is a target's failure to load its rows into the warehouse, as
// opposed to a failure to read them from the source.
type LoadError struct{ Err error }

func (e *LoadError) Error() string { return e.Err.Error() }

// Unwrap returns the writer's error.
func (e *LoadError) Unwrap() error { return e.Err }

// Run reads every target's window and loads it. It returns when all targets
// are done or failed, or when ctx is cancelled; in that case the rows already
// fetched are still loaded and the marks of completed targets committed
// before it returns. Targets whose INSERT failed with a retryable error
// after its rows were streamed (ClickHouse restarted, a connection reset)
// are read and loaded again, up to loadPasses times in all.
func (e *Engine) Run(ctx context.Context, targets []Target) RunResult {
	byID := make(map[string]Target, len(targets))
	for _, t := range targets {
		byID[t.Variable.ID] = t
	}
	floor := e.opts.Floor
	var total RunResult
	for pass := 1; ; pass++ {
		res := e.runOnce(ctx, targets, floor)
		if pass == 1 {
			total.Targets = res.Targets
		}
		total.Completed += res.Completed
		total.Points += res.Points
		total.Requests += res.Requests
		total.Splits += res.Splits
		if res.FloorMovedTo != 0 {
			total.FloorMovedTo, floor = res.FloorMovedTo, res.FloorMovedTo
		}
		if total.CommitErr == nil {
			total.CommitErr = res.CommitErr
		}
		var again []Target
		var cause error
		for _, f := range res.Failed {
			var le *LoadError
			if errors.As(f.Err, &le) && IsRetryable(le) && ctx.Err() == nil && pass < loadPasses {
				again = append(again, byID[f.Variable.ID])
				cause = f.Err
				continue
			}
			total.Failed = append(total.Failed, f)
		}
		if len(again) == 0 {
			return total
		}
		e.log.Warn("clickhouse write failed mid-insert; reading those variables again",
			zap.Int("variables", len(again)), zap.Int("pass", pass+1), zap.Error(cause))
		if e.m != nil {
			e.m.loadRetries.Add(float64(len(again)))
		}
		targets = again
	}
}

// runOnce is one pass of Run over targets, with the retention floor at floor.
func (e *Engine) runOnce(ctx context.Context, targets []Target, floor int64) RunResult {
	r := &run{e: e, ctx: ctx, byID: make(map[string]*targetState, len(targets))}
	r.floor.Store(floor)
	r.pool.New = func() any { return new(Batch) }
	states := make([]*targetState, 0, len(targets))
	for _, t := range targets {
		ts := &targetState{Target: t, start: t.Start, end: t.End, pending: 1}
		if _, dup := r.byID[t.Variable.ID]; dup {
			continue
		}
		r.byID[t.Variable.ID] = ts
		states = append(states, ts)
	}
	r.q = newQueue(ctx)
	for _, req := range Group(states, e.opts.VariablesPerRequest) {
		r.q.push(req)
	}
	r.q.doneAdding()

	r.chunks = make(chan *Batch, e.opts.InsertWorkers)
	var loaders sync.WaitGroup
	for range e.opts.InsertWorkers {
		loaders.Add(1)
		go func() { defer loaders.Done(); r.loader() }()
	}
	commitDone := make(chan struct{})
	stopCommit := make(chan struct{})
	go func() { defer close(commitDone); r.committer(stopCommit) }()

	var fetchers sync.WaitGroup
	for range e.opts.MaxInFlight {
		fetchers.Add(1)
		go func() { defer fetchers.Done(); r.fetcher() }()
	}
	fetchers.Wait()
	close(r.chunks)
	loaders.Wait()
	close(stopCommit)
	<-commitDone

	res := RunResult{
		Targets:  len(states),
		Points:   r.points.Load(),
		Requests: r.requests.Load(),
		Splits:   r.splits.Load(),
	}
	r.mu.Lock()
	res.Completed = r.complete
	res.Failed = r.failed
	r.mu.Unlock()
	// Targets never finished (the run was cancelled) count as failed, so the
	// caller reports them and their marks stay where they were.
	for _, ts := range states {
		if ts.pending > 0 {
			res.Failed = append(res.Failed, &TargetError{Variable: ts.Variable, Start: ts.start, End: ts.end, Err: context.Cause(ctx)})
		}
	}
	if r.moved {
		res.FloorMovedTo = r.floor.Load()
	}
	res.CommitErr = r.commitErr
	return res
}

func (r *run) fetcher() {
	chunk := r.pool.Get().(*Batch)
	chunk.Reset()
	var since time.Time
	for {
		req := r.q.pop()
		if req == nil {
			break
		}
		if chunk.Len() == 0 {
			since = time.Now()
		}
		chunk = r.fetch(req, chunk)
		r.q.done()
		// Rows do not wait in a fetcher's chunk longer than BatchAge: with
		// a slow source the chunk would otherwise fill for minutes, and no
		// insert, hence no mark, would happen until it is full.
		if chunk.Len() > 0 && time.Since(since) >= r.e.opts.BatchAge {
			r.handoff(chunk)
			chunk = r.pool.Get().(*Batch)
			chunk.Reset()
		}
	}
	r.handoff(chunk)
}

// fetch runs one request and returns the chunk to keep appending to.
func (r *run) fetch(req *request, chunk *Batch) *Batch {
	if err := r.ctx.Err(); err != nil {
		r.failRequest(req, context.Cause(r.ctx))
		return chunk
	}
	floor := r.floor.Load()
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
	r.requests.Add(1)
	err := r.e.src.Series(r.ctx, SeriesRequest{VariableIDs: ids, Start: req.start, End: req.seriesEnd(), Limit: r.e.opts.RowsPerRequest}, sink)
	chunk = sink.chunk
	if err != nil {
		// Frames of this request not yet handed off are discarded; the whole
		// request is read again or fails.
		chunk.Truncate(sink.reqStart)
		chunk.Bytes = sink.reqBytes
		r.mu.Lock()
		for _, sp := range chunk.Spans[sink.reqSpans:] {
			r.releaseLocked(r.byID[sp.VariableID])
		}
		r.mu.Unlock()
		chunk.Spans = chunk.Spans[:sink.reqSpans]
		r.retryOrFail(req, err, sink.touched)
		return chunk
	}
	r.finishRequest(req, sink.cut)
	return chunk
}

// retryOrFail decides what a failed request becomes. The source retries
// failures that happen before its response reaches the sink, within its own
// budget; the engine re-issues only requests whose response failed after it
// started (touched), which the source cannot retry without the caller
// discarding what it already received.
func (r *run) retryOrFail(req *request, err error, touched bool) {
	switch {
	case r.ctx.Err() != nil:
		r.failRequest(req, context.Cause(r.ctx))
	case IsRetention(err):
		if perr := r.moveFloor(req, err); perr != nil {
			r.failRequest(req, perr)
			return
		}
		r.q.push(req)
	case r.confine(req, err):
	case touched && IsRetryable(err) && req.attempt+1 < r.e.opts.RequestAttempts:
		req.attempt++
		r.e.log.Warn("raw series request failed, retrying", zap.Int("variables", len(req.targets)),
			zap.String("from", msTime(req.start)), zap.String("to", msTime(req.end)), zap.Int("attempt", req.attempt), zap.Error(err))
		if r.e.m != nil {
			r.e.m.requestRetries.Inc()
		}
		t := time.NewTimer(r.e.opts.RetryWait * time.Duration(1<<min(req.attempt, 6)))
		select {
		case <-t.C:
		case <-r.ctx.Done():
		}
		t.Stop()
		r.q.push(req)
	default:
		r.failRequest(req, err)
	}
}

// moveFloor reacts to a 403003: the account's window is shorter than
// configured (or the service's clock is ahead of ours). It searches the
// service's real floor with probes of one millisecond (see findFloor) and
// moves the floor to it plus FloorMargin, so that nothing the service still
// holds is skipped and the search costs a few dozen requests, not one per
// hour of the gap. Points before the new floor are out of reach; that is
// logged once per run. An error is a probe's failure for another reason.
func (r *run) moveFloor(req *request, err error) error {
	r.floorMu.Lock()
	defer r.floorMu.Unlock()
	cur := r.floor.Load()
	if req.start < cur {
		return nil // another request moved it already; retry at the new floor
	}
	found, perr := r.findFloor(req.targets[0].Variable.ID, max(cur, req.start), req.end)
	if perr != nil {
		return fmt.Errorf("searching the service's retention floor after %w: %w", err, perr)
	}
	next := found + r.e.opts.FloorMargin.Milliseconds()
	r.floor.Store(next)
	if !r.moved {
		r.e.log.Warn("the service rejected a range as past its retention window; moving the retention floor forward (set source.retention to the account's real window to avoid this)",
			zap.String("configured_floor", msTime(r.e.opts.Floor)), zap.String("service_floor", msTime(found)),
			zap.String("new_floor", msTime(next)), zap.Error(err))
	}
	r.moved = true
	return nil
}

// floorResolution is how close findFloor gets to the service's floor.
const floorResolution = int64(time.Second / time.Millisecond)

// findFloor returns the earliest start (within floorResolution) that the
// service accepts for the variable id, given that it rejected lo; end+1
// when it rejects everything up to end. It probes [t, t] windows: forward
// in doubling steps from one hour until one is accepted, then by bisection
// between the last rejected and the first accepted probe.
func (r *run) findFloor(id string, lo, end int64) (int64, error) {
	probe := func(at int64) (bool, error) {
		r.requests.Add(1)
		err := r.e.src.Series(r.ctx, SeriesRequest{VariableIDs: []string{id}, Start: at, End: at, Limit: 1}, discardSink{})
		switch {
		case err == nil:
			return true, nil
		case IsRetention(err):
			return false, nil
		default:
			return false, err
		}
	}
	hi := end + 1 // accepted, or past the window
	for step := int64(time.Hour / time.Millisecond); lo+step < hi; step *= 2 {
		ok, err := probe(lo + step)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = lo + step
			break
		}
		lo += step
	}
	for hi-lo > floorResolution {
		mid := lo + (hi-lo)/2
		ok, err := probe(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// discardSink drops the rows of a floor probe.
type discardSink struct{}

func (discardSink) Point(int, Point) error  { return nil }
func (discardSink) EndFrame(int, int) error { return nil }

// confine keeps a failure that one variable may have caused with that
// variable, so that one bad variable does not fail up to
// VariablesPerRequest others every cycle. When the source ties the failure
// to one variable (a frame it could not decode, a rejection naming it),
// that variable fails and the others are asked for again without it. When
// it only says a variable may have caused it (a 404 for a variable deleted
// since the walk, a 400, a 403 on one device), the request is split in
// halves until the failure is confined. It returns false, and does
// nothing, for a failure of the whole request or of a single variable.
func (r *run) confine(req *request, err error) bool {
	if len(req.targets) < 2 {
		return false
	}
	var parts [][]*targetState
	var ve VariableError
	if errors.As(err, &ve) && ve.VariableIndex() >= 0 && ve.VariableIndex() < len(req.targets) {
		i := ve.VariableIndex()
		r.mu.Lock()
		if bad := req.targets[i]; bad.err == nil {
			bad.err = err
		}
		r.mu.Unlock()
		parts = [][]*targetState{append(append([]*targetState(nil), req.targets[:i]...), req.targets[i+1:]...)}
	} else if IsNotFound(err) || IsScoped(err) {
		half := len(req.targets) / 2
		parts = [][]*targetState{req.targets[:half:half], req.targets[half:]}
	} else {
		return false
	}
	r.mu.Lock()
	for _, p := range parts {
		for _, t := range p {
			t.pending++
		}
	}
	for _, t := range req.targets {
		r.releaseLocked(t)
	}
	r.mu.Unlock()
	for _, p := range parts {
		r.q.push(&request{targets: p, start: req.start, end: req.end, open: req.open})
	}
	return true
}

func (r *run) failRequest(req *request, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range req.targets {
		if t.err == nil {
			t.err = err
		}
		r.releaseLocked(t)
	}
}

// finishRequest releases the request's hold on its targets and queues the
// halves of every frame that the limit cut. An open request's halves are a
// closed one and an open one, so the future beyond end is read once, with
// the later half. An open request of one millisecond that is cut cannot be
// halved: its millisecond is read closed, and the future it hid is noted as
// starting after end, which makes the next cycle read the variable again.
func (r *run) finishRequest(req *request, cut []*targetState) {
	r.mu.Lock()
	if len(cut) > 0 {
		var first, second *request
		switch {
		case req.start < req.end:
			mid := req.start + (req.end-req.start)/2
			first = &request{targets: cut, start: req.start, end: mid}
			second = &request{targets: cut, start: mid + 1, end: req.end, open: req.open}
		default: // an open request of one millisecond; a closed one is never cut
			first = &request{targets: cut, start: req.start, end: req.end}
			for _, t := range cut {
				t.futureMs = earliest(t.futureMs, req.end+1)
			}
		}
		for _, t := range cut {
			t.pending++
			if second != nil {
				t.pending++
			}
		}
		r.splits.Add(1)
		// The halves are pushed after unlocking; pending counts them now
		// so that no target completes in between. They go to the front
		// of the queue: finishing the variables already started before
		// starting others lets their marks be committed as the run goes,
		// so a run stopped midway (SIGTERM, a crash) keeps that progress.
		defer func() {
			if second != nil {
				r.q.pushFront(second)
			}
			r.q.pushFront(first)
		}()
	}
	for _, t := range req.targets {
		r.releaseLocked(t)
	}
	r.mu.Unlock()
}

// earliest is the smaller of two timestamps where 0 means none.
func earliest(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// releaseLocked drops one hold on t; the last one completes it.
func (r *run) releaseLocked(t *targetState) {
	t.pending--
	if t.pending > 0 {
		return
	}
	if t.err != nil {
		r.failed = append(r.failed, &TargetError{Variable: t.Variable, Start: t.start, End: t.end, Err: t.err})
		return
	}
	r.complete++
	if m, ok := r.e.markFn(t.Target, Outcome{MaxTs: t.maxTs, FutureMs: t.futureMs}); ok {
		r.ready = append(r.ready, m)
	}
}

// handoff passes a chunk to the loaders. Each of its spans holds its target
// from the moment the span is added until the chunk is acknowledged.
func (r *run) handoff(chunk *Batch) {
	if chunk.Len() == 0 {
		chunk.Reset()
		r.pool.Put(chunk)
		return
	}
	r.chunks <- chunk
}

func (r *run) loader() {
	if sw, ok := r.e.w.(StreamWriter); ok {
		r.streamLoader(sw)
		return
	}
	o := r.e.opts
	var held []*Batch
	rows, size := 0, 0
	timer := time.NewTimer(o.BatchAge)
	defer timer.Stop()
	flush := func() {
		if len(held) == 0 {
			return
		}
		// Loads finish even when the run is cancelled: these rows were
		// fetched, and committing them is what makes a restart cheap.
		err := r.e.w.Write(context.WithoutCancel(r.ctx), held)
		r.ack(held, err)
		for _, c := range held {
			c.Reset()
			r.pool.Put(c)
		}
		held, rows, size = held[:0], 0, 0
	}
	for {
		select {
		case c, ok := <-r.chunks:
			if !ok {
				flush()
				return
			}
			held = append(held, c)
			rows += c.Len()
			size += c.Bytes
			if rows >= o.BatchRows || size >= o.BatchBytes {
				flush()
				timer.Reset(o.BatchAge)
			}
		case <-timer.C:
			flush()
			timer.Reset(o.BatchAge)
		}
	}
}

// streamLoader loads through a StreamWriter: each chunk is appended to the
// open INSERT and recycled at once, keeping only its spans until the INSERT
// is committed, so BatchRows sizes the INSERT without costing memory.
func (r *run) streamLoader(sw StreamWriter) {
	o := r.e.opts
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
		r.ackSpans(spans, err)
		ins, spans, rows, size = nil, spans[:0], 0, 0
	}
	commit := func() {
		if ins != nil {
			settle(ins.Commit())
		}
	}
	add := func(c *Batch) {
		defer func() { c.Reset(); r.pool.Put(c) }()
		if down != nil {
			r.ackSpans(c.Spans, down)
			return
		}
		if ins == nil {
			// Loads finish even when the run is cancelled: these rows were
			// fetched, and committing them is what makes a restart cheap.
			var err error
			if ins, err = sw.Begin(context.WithoutCancel(r.ctx)); err != nil {
				down = err
				r.ackSpans(c.Spans, down)
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
		case c, ok := <-r.chunks:
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

func (r *run) ack(chunks []*Batch, err error) {
	for _, c := range chunks {
		r.ackSpans(c.Spans, err)
	}
}

// ackSpans settles the rows of spans: loaded when err is nil, failed
// otherwise. Each span releases the hold it put on its target.
func (r *run) ackSpans(spans []Span, err error) {
	if err != nil {
		err = &LoadError{Err: err}
	}
	var n int64
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range spans {
		t := r.byID[s.VariableID]
		if err != nil {
			if t.err == nil {
				t.err = err
			}
		} else {
			t.maxTs = max(t.maxTs, s.MaxTsMs)
			t.points += int64(s.Rows)
			n += int64(s.Rows)
		}
		r.releaseLocked(t)
	}
	r.points.Add(n)
	if r.e.opts.Progress != nil {
		r.e.opts.Progress.Add(n)
	}
	if r.e.m != nil {
		r.e.m.pointsLoaded.Add(float64(n))
	}
}

// committer writes ready marks every second and once more at the end.
func (r *run) committer(stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			r.commit()
		case <-stop:
			r.commit()
			return
		}
	}
}

func (r *run) commit() {
	r.mu.Lock()
	marks := r.ready
	r.ready = nil
	r.mu.Unlock()
	if len(marks) == 0 || r.e.st == nil {
		return
	}
	if err := r.e.st.Commit(context.WithoutCancel(r.ctx), marks); err != nil {
		r.e.log.Error("committing marks failed; the rows are loaded and the next cycle re-reads them", zap.Int("marks", len(marks)), zap.Error(err))
		r.mu.Lock()
		r.commitErr = fmt.Errorf("commit %d marks: %w", len(marks), err)
		r.mu.Unlock()
	}
}

// frameSink appends decoded rows to the fetcher's chunk, drops frames cut by
// the limit and hands full chunks to the loaders at frame boundaries.
type frameSink struct {
	r     *run
	req   *request
	chunk *Batch
	limit int

	// reqStart, reqBytes and reqSpans mark where this request's rows begin
	// in the current chunk, so a failed request can be discarded.
	reqStart, reqBytes, reqSpans int
	frameStart, frameBytes       int
	frameMax                     int64
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
	b := s.chunk
	b.VariableID = append(b.VariableID, v.ID)
	b.DeviceID = append(b.DeviceID, v.DeviceID)
	b.DeviceLabel = append(b.DeviceLabel, v.DeviceLabel)
	b.VariableLabel = append(b.VariableLabel, v.Label)
	b.TsMs = append(b.TsMs, p.TsMs)
	b.Value = append(b.Value, p.Value)
	b.Context = append(b.Context, ctx)
	b.Lat = append(b.Lat, lat)
	b.Lng = append(b.Lng, lng)
	b.HasLat = append(b.HasLat, hasLat)
	b.HasLng = append(b.HasLng, hasLng)
	b.Bytes += 42 + len(v.ID) + len(v.DeviceID) + len(v.DeviceLabel) + len(v.Label) + len(ctx)
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
		s.r.mu.Lock()
		t.futureMs = earliest(t.futureMs, s.frameFuture)
		if n := b.Len() - s.frameStart; n > 0 {
			b.Spans = append(b.Spans, Span{VariableID: t.Variable.ID, Rows: n, MaxTsMs: s.frameMax})
			t.pending++
		}
		s.r.mu.Unlock()
	}
	s.frameMax, s.frameFuture = 0, 0
	if b.Len() >= maxChunkRows {
		s.r.handoff(b)
		b = s.r.pool.Get().(*Batch)
		b.Reset()
		s.chunk = b
		s.reqStart, s.reqBytes, s.reqSpans = 0, 0, 0
	}
	s.frameStart, s.frameBytes = b.Len(), b.Bytes
	return nil
}

// queue is the work list of requests. Splits add work while fetchers run, so
// it closes only when nothing is queued and nothing is being worked on.
type queue struct {
	mu          sync.Mutex
	cond        *sync.Cond
	items       []*request
	outstanding int
	adding      bool
	cancelled   bool
}

func newQueue(ctx context.Context) *queue {
	q := &queue{adding: true}
	q.cond = sync.NewCond(&q.mu)
	context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.cancelled = true
		q.mu.Unlock()
		q.cond.Broadcast()
	})
	return q
}

func (q *queue) push(r *request) {
	q.mu.Lock()
	q.items = append(q.items, r)
	q.outstanding++
	q.mu.Unlock()
	q.cond.Signal()
}

// pushFront queues r before every queued request.
func (q *queue) pushFront(r *request) {
	q.mu.Lock()
	q.items = append([]*request{r}, q.items...)
	q.outstanding++
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *queue) doneAdding() {
	q.mu.Lock()
	q.adding = false
	q.mu.Unlock()
	q.cond.Broadcast()
}

// pop returns the next request, or nil when the work is finished or the
// context cancelled. Every non-nil pop must be followed by done.
func (q *queue) pop() *request {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && (q.outstanding > 0 || q.adding) && !q.cancelled {
		q.cond.Wait()
	}
	if len(q.items) == 0 || q.cancelled {
		return nil
	}
	r := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return r
}

// done marks one popped request finished; a request re-queued before done
// keeps the queue open.
func (q *queue) done() {
	q.mu.Lock()
	q.outstanding--
	if q.outstanding <= 0 {
		q.cond.Broadcast()
	}
	q.mu.Unlock()
}
