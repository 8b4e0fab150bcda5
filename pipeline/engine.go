package pipeline

// The engine moves the points of a set of targets from a Source to a Writer
// and commits their marks. A pass over the targets is a reader (reader.go:
// the request queue, frames, cut frames and their proofs, the retention
// floor), loaders (load.go: the streaming INSERTs) and a committer
// (committer.go: holds, acknowledgements, the commit loop handing the
// commit chain of commit.go what each target did), joined by acknowledgements: the reader hands chunks of
// rows to the loaders and tells the committer when it is done with a
// target; the loaders acknowledge the rows' spans to the committer. This
// file holds the Engine, its runs and the composition of a pass.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// msTime formats a POSIX-ms timestamp for logs and errors.
func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// Moved counts what one move of points did: a RunResult holds it for an
// engine run, and a Summary the same for the cycle or backfill that ran it.
type Moved struct {
	Targets   int
	Completed int
	Points    int64
	Requests  int64
	Splits    int64
	// CountRequests are the count requests that tried to prove cut frames
	// whole; RowsServed the rows the source served in all frames;
	// MinRequests the fewest raw-series requests the limit allows for the
	// points loaded (minimumRequests).
	CountRequests int64
	RowsServed    int64
	MinRequests   int64
	// Reloaded is the rows of cut frames loaded and then read again
	// (Points counts them twice).
	Reloaded int64
	Failed   []*TargetError
	// Links are the time each link of the commit chain took (its own
	// part), in the order of EngineOptions.Links.
	Links []LinkTime
}

// RunResult sums up one engine run.
type RunResult struct {
	Moved
	// FloorMovedTo is the retention floor after the run when the service
	// made it move forward; zero otherwise.
	FloorMovedTo int64
	// CommitErr is the error of committing marks, if any.
	CommitErr error
}

// err is the run's outcome as one error, for the stage wrapper: the
// commit's failure, or the first of the variables' failures.
func (r RunResult) err() error {
	if r.CommitErr != nil {
		return r.CommitErr
	}
	if len(r.Failed) > 0 {
		return fmt.Errorf("%d variables failed, the first: %w", len(r.Failed), r.Failed[0])
	}
	return nil
}

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
	if m == nil {
		m = unregistered()
	}
	return &Engine{src: src, w: w, st: st, log: logger, m: m, opts: opts, markFn: markFn}
}

// loadPasses bounds how often a run reads again the targets whose rows
// ClickHouse lost mid-INSERT (a streamed INSERT cannot be resent, so its
// rows are read from the source anew).
const loadPasses = 3

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
	ctx = e.named(ctx, "run", -1)
	floor := e.opts.Floor
	var total RunResult
	for pass := 1; ; pass++ {
		res := e.pass(ctx, targets, floor)
		if res.FloorMovedTo != 0 {
			floor = res.FloorMovedTo
		}
		var again []Target
		var cause error
		var kept []*TargetError
		for _, f := range res.Failed {
			var le *LoadError
			if errors.As(f.Err, &le) && IsRetryable(le) && ctx.Err() == nil && pass < loadPasses {
				again = append(again, byID[f.Variable.ID])
				cause = f.Err
				continue
			}
			kept = append(kept, f)
		}
		res.Failed = kept
		if pass > 1 {
			// Targets of the first pass read again: counted once, and
			// the fewest requests they need are the first pass's.
			res.Targets, res.MinRequests = 0, 0
		}
		total.add(res)
		if len(again) == 0 {
			return total
		}
		e.log.Warn("clickhouse write failed mid-insert; reading those variables again",
			zap.Int("variables", len(again)), zap.Int("pass", pass+1), zap.Error(cause))
		e.m.loadRetries.Add(float64(len(again)))
		targets = again
	}
}

// pass is one pass of Run over targets, with the retention floor at floor.
func (e *Engine) pass(ctx context.Context, targets []Target, floor int64) RunResult {
	seen := make(map[string]bool, len(targets))
	unique := make([]Target, 0, len(targets))
	for _, t := range targets {
		if !seen[t.Variable.ID] {
			seen[t.Variable.ID] = true
			unique = append(unique, t)
		}
	}
	c := newCommitter(e, unique)
	out := newChunks(e.opts.InsertWorkers)
	r := newReader(ctx, e, unique, floor, out, c)

	var loaders sync.WaitGroup
	for i := range e.opts.InsertWorkers {
		loaders.Add(1)
		ctx := e.named(ctx, "loader", i)
		go func() { defer loaders.Done(); turn(ctx); load(ctx, e.w, e.opts, out, c.ack) }()
	}
	commitDone := make(chan struct{})
	stopCommit := make(chan struct{})
	cctx := e.named(ctx, "committer", -1)
	go func() { defer close(commitDone); turn(cctx); c.run(cctx, stopCommit) }()
	r.run(ctx)
	loaders.Wait()
	turn(ctx)
	close(stopCommit)
	<-commitDone
	turn(ctx)

	res := RunResult{Moved: Moved{
		Targets:  len(unique),
		Requests: r.n.requests.Load() + r.floor.probes.Load(),
		Splits:   r.n.splits.Load(),

		CountRequests: r.proofs.asked.Load(),
		RowsServed:    r.n.served.Load(),
	}}
	c.result(&res)
	// Targets never done (the run was cancelled) count as failed, so the
	// caller reports them and their marks stay where they were.
	perVar := make([]int64, len(unique))
	for i, t := range unique {
		ts := r.byID[t.Variable.ID]
		points, done := c.loaded(t.Variable.ID)
		perVar[i] = points - ts.reloaded
		res.Reloaded += ts.reloaded
		if !done {
			res.Failed = append(res.Failed, &TargetError{Variable: ts.Variable, Start: ts.start, End: ts.end, Err: context.Cause(ctx)})
		}
	}
	res.MinRequests = minimumRequests(perVar, e.opts.RowsPerRequest, e.opts.VariablesPerRequest)
	res.FloorMovedTo = r.floor.movedTo()
	return res
}
