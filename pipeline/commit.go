package pipeline

import (
	"context"
	"fmt"
	"time"
)

// The commit chain: the one port through which the engine hands on what
// each target of a pass did, Benthos' AckFunc in our terms. The engine
// knows nothing of what is done with it. The chain is built from links,
// each a decorator of the next: cmd gives the engine the links that keep
// the warehouse's derived tables (the analyst tables of load/analyst,
// which recompute what a commit loaded before handing it on, and pace
// themselves), and the engine ends the chain with the command's mark rule
// and the state store (Marks), the one place a mark is decided.

// Done is what one target of a pass did, handed down the chain once the
// reader ended it and the warehouse acknowledged or failed every span of
// its rows.
type Done struct {
	Target
	// Outcome is what the read found: the mark rule's input. Its MaxTs is
	// the greatest timestamp the warehouse acknowledged.
	Outcome
	// Points is how many rows the warehouse acknowledged, and MinTs the
	// smallest of their timestamps (valid when Points > 0).
	Points int64
	MinTs  int64
	// Sent is how many rows went to the warehouse, acknowledged or
	// failed, and SentMinTs and SentMaxTs bound their timestamps (valid
	// when Sent > 0). An INSERT that failed may have stored some of its
	// rows all the same (blocks written before a connection reset), and
	// no later read is bound to load them again (the retention floor, or
	// another process's mark, may pass them first): what derives from the
	// warehouse's rows is owed over them too.
	Sent                 int64
	SentMinTs, SentMaxTs int64
	// Err is why the target failed, nil when it did not: its mark stays
	// where it was, but the rows it loaded are in the warehouse all the
	// same, so a link that derives from them is handed it too.
	Err error
}

// Committer is the commit port: a link of the chain, or its end.
type Committer interface {
	// Commit takes the targets done since the last call, in the order
	// they were done. A link may hold them back and hand them on with a
	// later call, but not past the call with final set, a pass's last:
	// after it, nothing of the pass may be left held. An error means some
	// of these targets (or of those held back) may not have reached the
	// end of the chain: their marks stay, so the next cycle reads their
	// windows again; a link that fails does not hand on, not even a final
	// call. The calls of one pass come one at a time, and ctx is never
	// cancelled: a cancelled run still commits what it completed.
	Commit(ctx context.Context, done []Done, final bool) error
}

// CommitFunc makes a function a Committer.
type CommitFunc func(ctx context.Context, done []Done, final bool) error

// Commit calls f.
func (f CommitFunc) Commit(ctx context.Context, done []Done, final bool) error {
	return f(ctx, done, final)
}

// Link is one link of the commit chain, set in EngineOptions.Links.
type Link struct {
	// Stage is the label of the link's own time (what the links after it
	// take is not counted) in fleetsync_stage_duration_seconds and in a
	// cycle's summary (Moved.Links).
	Stage string
	// Wrap returns the link in front of next, with fresh state: the
	// engine builds the chain anew for each pass.
	Wrap func(next Committer) Committer
}

// LinkTime is the time a link of the chain took over a run, and its first
// failure.
type LinkTime struct {
	Stage string
	Took  time.Duration
	Err   error
}

// Marks is the end of the chain: fn decides the mark of each target done
// without failure, and st stores them (st nil stores none).
func Marks(fn MarkFunc, st StateStore) Committer {
	return CommitFunc(func(ctx context.Context, done []Done, _ bool) error {
		var marks []Mark
		for _, d := range done {
			if d.Err != nil {
				continue
			}
			if m, ok := fn(d.Target, d.Outcome); ok {
				marks = append(marks, m)
			}
		}
		if len(marks) == 0 || st == nil {
			return nil
		}
		if err := st.Commit(ctx, marks); err != nil {
			return fmt.Errorf("commit %d marks: %w", len(marks), err)
		}
		return nil
	})
}

// chain builds links in front of end, each clocked (in the order of
// links).
func chain(links []Link, end Committer) (Committer, []*linkClock) {
	c := end
	clocks := make([]*linkClock, len(links))
	for i := len(links) - 1; i >= 0; i-- {
		next := &nextClock{Committer: c}
		clocks[i] = &linkClock{Committer: links[i].Wrap(next), stage: links[i].Stage, next: next}
		c = clocks[i]
	}
	return c, clocks
}

// nextClock times the calls a link makes of the rest of the chain, and
// notes the last one's error.
type nextClock struct {
	Committer
	took time.Duration
	err  error
}

func (n *nextClock) Commit(ctx context.Context, done []Done, final bool) error {
	start := time.Now()
	n.err = n.Committer.Commit(ctx, done, final)
	n.took += time.Since(start)
	return n.err
}

// linkClock times a link's own part of each call (its calls of the rest
// of the chain subtracted) and keeps its first failure: an error the rest
// of the chain returned through it is not the link's.
type linkClock struct {
	Committer
	stage string
	next  *nextClock
	took  time.Duration
	err   error
}

func (c *linkClock) Commit(ctx context.Context, done []Done, final bool) error {
	start, before := time.Now(), c.next.took
	c.next.err = nil
	err := c.Committer.Commit(ctx, done, final)
	c.took += time.Since(start) - (c.next.took - before)
	if err != nil && c.next.err == nil && c.err == nil {
		c.err = err
	}
	return err
}

// times are the clocks' times.
func times(clocks []*linkClock) []LinkTime {
	out := make([]LinkTime, len(clocks))
	for i, c := range clocks {
		out[i] = LinkTime{Stage: c.stage, Took: c.took, Err: c.err}
	}
	return out
}
