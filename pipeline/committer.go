package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The committer is the second half of a pass: it turns acknowledgements
// into marks, Benthos' AckFunc in our terms. It hears from the reader once
// no read of a target is left (readEnded), and from the loaders once the
// spans of rows they were handed are in the warehouse or failed (ack); a
// target whose reads ended and whose spans are all acknowledged is done.
// A done target that did not fail gets its mark (the mark rules are
// marks.go's), and every done target leaves the Rollup hook the range the
// warehouse may hold for it (touchedOf, rollup.go); run hands the hook its
// ranges, then commits the marks, paced. It never calls the reader: the
// data flows one way, reader → loaders → committer.

// readEnd is the reader's last word on a target, given once no read of it
// is queued or running: the start of its window as read (moved up to the
// retention floor), the earliest point after its end its frames showed or
// a lower bound of it (0 when none), and how many spans of its rows went
// to the loaders.
type readEnd struct {
	id              string
	start, futureMs int64
	spans           int
}

// hold is one target as the committer holds back its mark: until the
// reader's last word (told, once ended) and an acknowledgement of each
// span the reader counted in it.
type hold struct {
	Target
	ended bool
	told  readEnd
	acked int
	done  bool
	// minTs and maxTs bound the timestamps of its acknowledged rows
	// (minTs is valid when points > 0).
	minTs, maxTs int64
	points       int64
	err          error
}

// committer holds the targets of one pass until they are done and commits
// their marks.
type committer struct {
	e       *Engine
	mu      sync.Mutex
	held    map[string]*hold
	ready   []Mark
	touched []Touched
	failed  []*TargetError
	// complete counts the targets done without failure.
	complete int
	err      error
	// rolled is the time spent in the Rollup hook; only run's goroutine
	// writes it, and the pass reads it once run has returned.
	rolled time.Duration
}

// newCommitter holds each of targets (unique ids).
func newCommitter(e *Engine, targets []Target) *committer {
	c := &committer{e: e, held: make(map[string]*hold, len(targets))}
	for _, t := range targets {
		c.held[t.Variable.ID] = &hold{Target: t}
	}
	return c
}

// fail records err as the failure of the variable id, unless it has one
// already: its mark stays where it was.
func (c *committer) fail(id string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.held[id]; h.err == nil {
		h.err = err
	}
}

// readEnded takes the reader's last word on a target.
func (c *committer) readEnded(end readEnd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.held[end.id]
	h.ended, h.told = true, end
	c.settleLocked(h)
}

// ack acknowledges spans the loaders were handed: loaded when err is nil,
// failed otherwise. Each span releases the hold it put on its target.
func (c *committer) ack(spans []Span, err error) {
	if err != nil {
		err = &LoadError{Err: err}
	}
	var n int64
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range spans {
		h := c.held[s.VariableID]
		if err != nil {
			if h.err == nil {
				h.err = err
			}
		} else {
			if h.points == 0 || s.MinTsMs < h.minTs {
				h.minTs = s.MinTsMs
			}
			h.maxTs = max(h.maxTs, s.MaxTsMs)
			h.points += int64(s.Rows)
			n += int64(s.Rows)
		}
		h.acked++
		c.settleLocked(h)
	}
	if c.e.opts.Progress != nil {
		c.e.opts.Progress.Add(n)
	}
	c.e.m.pointsLoaded.Add(float64(n))
}

// settleLocked makes h done once the reader ended it and every span it
// counted is acknowledged. Caller holds c.mu.
func (c *committer) settleLocked(h *hold) {
	if h.done || !h.ended || h.acked < h.told.spans {
		return
	}
	h.done = true
	// What landed is rolled up even when the target failed: the rows are
	// in the table whether or not its mark moves.
	if r, ok := h.touchedOf(); ok {
		c.touched = append(c.touched, r)
	}
	if h.err != nil {
		c.failed = append(c.failed, &TargetError{Variable: h.Variable, Start: h.told.start, End: h.End, Err: h.err})
		return
	}
	c.complete++
	if m, ok := c.e.markFn(h.Target, Outcome{MaxTs: h.maxTs, FutureMs: h.told.futureMs, StartMs: h.told.start}); ok {
		c.ready = append(c.ready, m)
	}
}

// rollupPace bounds the share of a pass's time the committer spends in
// rollup recomputes while the loaders run: after a commit whose recompute
// took d, the next one waits at least rollupPace·d. A recompute reads its
// points under FINAL; run every second beside the streaming INSERTs of a
// backfill it read the fresh, still unmerged parts over and over and
// competed with the inserts for the server's CPU. Fewer, larger
// statements do the same work once. Crash safety is unchanged: marks are
// still written only after the recompute of the rows below them, so a
// crash costs at most the re-read of what the last rollupPace·d seconds
// loaded, never an inexact row; maxCommitGap bounds that re-read.
const rollupPace = 9

// maxCommitGap is the longest the pacing holds marks back.
const maxCommitGap = time.Minute

// run writes ready marks every second, paced by rollupPace, and once more
// after stop is closed.
func (c *committer) run(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var next time.Time // no commit before next
	paced := func() {
		start := time.Now()
		if rolled := c.commit(ctx); rolled > 0 {
			next = start.Add(min(rolled*(rollupPace+1), maxCommitGap))
		}
	}
	for {
		select {
		case <-tick.C:
			turn(ctx)
			if time.Now().Before(next) {
				continue
			}
			paced()
		case <-stop:
			turn(ctx)
			c.commit(ctx)
			return
		}
	}
}

// commit recomputes the rollups of the targets done since the last
// commit, then writes the ready marks. The rollups go first so that a
// crash between the load and the rollup leaves the marks behind: the next
// cycle reads those windows again and hands them to the hook again. It
// returns how long the hook took.
func (c *committer) commit(ctx context.Context) time.Duration {
	c.mu.Lock()
	marks, touched := c.ready, c.touched
	c.ready, c.touched = nil, nil
	c.mu.Unlock()
	rolled, err := rollUp(ctx, c.e.opts.Rollup, c.e.m, touched)
	c.rolled += rolled
	if err != nil {
		c.e.log.Error("recomputing the rollups failed; the marks of these variables stay where they were, so the next cycle reads their windows again and recomputes them",
			zap.Int("variables", len(touched)), zap.Int("marks", len(marks)), zap.Error(err))
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
		return rolled
	}
	if len(marks) == 0 || c.e.st == nil {
		return rolled
	}
	if err := c.e.st.Commit(context.WithoutCancel(ctx), marks); err != nil {
		c.e.log.Error("committing marks failed; the rows are loaded and the next cycle re-reads them", zap.Int("marks", len(marks)), zap.Error(err))
		c.mu.Lock()
		c.err = fmt.Errorf("commit %d marks: %w", len(marks), err)
		c.mu.Unlock()
	}
	return rolled
}

// result fills in what the committer knows of a pass that has ended (run
// returned): the targets done and failed, the points loaded, the first
// commit error and the hook's time. A target not done (the run was
// cancelled before the reader or the loaders ended it) is left for the
// caller, which knows the window it was reading.
func (c *committer) result(res *RunResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res.Completed = c.complete
	res.Failed = c.failed
	for _, h := range c.held {
		res.Points += h.points
	}
	res.CommitErr = c.err
	res.Rollup = c.rolled
}

// loaded is the points acknowledged for the variable id, and whether it is
// done.
func (c *committer) loaded(id string) (points int64, done bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.held[id]
	return h.points, h.done
}
