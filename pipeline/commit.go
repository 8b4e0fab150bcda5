package pipeline

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// releaseLocked drops one hold on t; the last one completes it.
func (p *pass) releaseLocked(t *targetState) {
	t.pending--
	if t.pending > 0 {
		return
	}
	// What landed is rolled up even when the target failed: the rows are
	// in the table whether or not its mark moves.
	if r, ok := t.touchedOf(); ok {
		p.touched = append(p.touched, r)
	}
	if t.err != nil {
		p.failed = append(p.failed, &TargetError{Variable: t.Variable, Start: t.start, End: t.end, Err: t.err})
		return
	}
	p.complete++
	if m, ok := p.e.markFn(t.Target, Outcome{MaxTs: t.maxTs, FutureMs: t.futureMs}); ok {
		p.ready = append(p.ready, m)
	}
}

// otherwise. Each span releases the hold it put on its target.
func (p *pass) ackSpans(spans []Span, err error) {
	if err != nil {
		err = &LoadError{Err: err}
	}
	var n int64
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range spans {
		t := p.byID[s.VariableID]
		if err != nil {
			if t.err == nil {
				t.err = err
			}
		} else {
			if t.points == 0 || s.MinTsMs < t.minTs {
				t.minTs = s.MinTsMs
			}
			t.maxTs = max(t.maxTs, s.MaxTsMs)
			t.points += int64(s.Rows)
			n += int64(s.Rows)
		}
		p.releaseLocked(t)
	}
	p.points.Add(n)
	if p.e.opts.Progress != nil {
		p.e.opts.Progress.Add(n)
	}
	p.e.m.pointsLoaded.Add(float64(n))
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

// committer writes ready marks every second, paced by rollupPace, and
// once more at the end.
func (p *pass) committer(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var next time.Time // no commit before next
	paced := func() {
		start := time.Now()
		if rolled := p.commit(ctx); rolled > 0 {
			next = start.Add(min(rolled*(rollupPace+1), maxCommitGap))
		}
	}
	for {
		select {
		case <-tick.C:
			if time.Now().Before(next) {
				continue
			}
			paced()
		case <-stop:
			p.commit(ctx)
			return
		}
	}
}

// commit recomputes the rollups of the targets completed since the last
// commit, then writes the ready marks. The rollups go first so that a
// crash between the load and the rollup leaves the marks behind: the next
// cycle reads those windows again and hands them to the hook again. It
// returns how long the hook took.
func (p *pass) commit(ctx context.Context) time.Duration {
	p.mu.Lock()
	marks, touched := p.ready, p.touched
	p.ready, p.touched = nil, nil
	p.mu.Unlock()
	rolled, err := p.rollUp(ctx, touched)
	if err != nil {
		p.e.log.Error("recomputing the rollups failed; the marks of these variables stay where they were, so the next cycle reads their windows again and recomputes them",
			zap.Int("variables", len(touched)), zap.Int("marks", len(marks)), zap.Error(err))
		p.mu.Lock()
		if p.commitErr == nil {
			p.commitErr = err
		}
		p.mu.Unlock()
		return rolled
	}
	if len(marks) == 0 || p.e.st == nil {
		return rolled
	}
	if err := p.e.st.Commit(context.WithoutCancel(ctx), marks); err != nil {
		p.e.log.Error("committing marks failed; the rows are loaded and the next cycle re-reads them", zap.Int("marks", len(marks)), zap.Error(err))
		p.mu.Lock()
		p.commitErr = fmt.Errorf("commit %d marks: %w", len(marks), err)
		p.mu.Unlock()
	}
	return rolled
}
