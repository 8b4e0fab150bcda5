package pipeline

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The committer is the second half of a pass: it turns acknowledgements
// into what the commit chain (commit.go) is handed. It hears from the
// reader once no read of a target is left (readEnded), and from the
// loaders once the spans of rows they were handed are in the warehouse or
// failed (ack); a target whose reads ended and whose spans are all
// acknowledged is done. Every second, and once more when the pass ends,
// run hands the chain the targets done since (Done: the target, what its
// read found, the range it loaded, its failure). It never calls the
// reader: the data flows one way, reader → loaders → committer → chain.

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

// hold is one target as the committer holds it back: until the
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
	// sent counts the rows of every span acknowledged, loaded or failed,
	// and sentMin and sentMax bound their timestamps (see Done.Sent).
	sent             int64
	sentMin, sentMax int64
	err              error
}

// committer holds the targets of one pass until they are done and hands
// them to the chain.
type committer struct {
	e      *Engine
	mu     sync.Mutex
	held   map[string]*hold
	done   []Done
	failed []*TargetError
	// complete counts the targets done without failure.
	complete int
	err      error
	// chain is the pass's commit chain, and clocks its links' clocks;
	// only run's goroutine calls it, and the pass reads the clocks once
	// run has returned.
	chain  Committer
	clocks []*linkClock
}

// newCommitter holds each of targets (unique ids).
func newCommitter(e *Engine, targets []Target) *committer {
	c := &committer{e: e, held: make(map[string]*hold, len(targets))}
	c.chain, c.clocks = chain(e.opts.Links, Marks(e.markFn, e.st))
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
		if h.sent == 0 || s.MinTsMs < h.sentMin {
			h.sentMin = s.MinTsMs
		}
		h.sentMax = max(h.sentMax, s.MaxTsMs)
		h.sent += int64(s.Rows)
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
	// A failed target is handed on too: the rows it loaded are in the
	// warehouse whether or not its mark moves.
	c.done = append(c.done, Done{Target: h.Target, Outcome: Outcome{MaxTs: h.maxTs, FutureMs: h.told.futureMs, StartMs: h.told.start},
		Points: h.points, MinTs: h.minTs, Sent: h.sent, SentMinTs: h.sentMin, SentMaxTs: h.sentMax, Err: h.err})
	if h.err != nil {
		c.failed = append(c.failed, &TargetError{Variable: h.Variable, Start: h.told.start, End: h.End, Err: h.err})
		return
	}
	c.complete++
}

// run hands the chain the targets done every second, and once more, the
// final call, after stop is closed.
func (c *committer) run(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			turn(ctx)
			c.commit(ctx, false)
		case <-stop:
			turn(ctx)
			c.commit(ctx, true)
			return
		}
	}
}

// commit hands the chain the targets done since the last call, and keeps
// its first failure.
func (c *committer) commit(ctx context.Context, final bool) {
	c.mu.Lock()
	done := c.done
	c.done = nil
	c.mu.Unlock()
	// The chain finishes when the run is cancelled, as the loads do: what
	// it is handed is in the warehouse, and a cancelled run still writes
	// the marks of the targets it completed (Engine.Run).
	if err := c.chain.Commit(context.WithoutCancel(ctx), done, final); err != nil {
		c.e.log.Error("committing failed; the rows are loaded, and the marks of the variables it was handed stay where they were, so the next cycle reads their windows again",
			zap.Int("handed", len(done)), zap.Error(err))
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
	}
}

// result fills in what the committer knows of a pass that has ended (run
// returned): the targets done and failed, the points loaded, the first
// commit error and the time of each link of the chain. A target not done (the run was
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
	res.Links = times(c.clocks)
}

// loaded is the points acknowledged for the variable id, and whether it is
// done.
func (c *committer) loaded(id string) (points int64, done bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.held[id]
	return h.points, h.done
}
