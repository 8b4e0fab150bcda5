// Package analyst is the link of the commit chain (pipeline/commit.go)
// that keeps the analyst tables exact: the hourly rollups and the latest
// value of each variable, which a warehouse derives from its points
// (load/clickhouse's Tables). Before the targets of a commit are handed on
// to the marks, it hands the warehouse the range of each where the
// warehouse may hold points the tables do not reflect yet, so that a crash
// between the load and the recompute leaves the marks behind: the next
// cycle reads those windows again and hands them here again.
//
// Which hours a range covers, and how they are recomputed, is the
// warehouse's; what is handed, and when, is this package's.
package analyst

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Stage labels the link's time: fleetsync_stage_duration_seconds{stage},
// and the field of each cycle's log line.
const Stage = "rollup"

// Range is one variable's range of timestamps (POSIX ms, inclusive) where
// the warehouse may hold points the analyst tables do not reflect yet: the
// points a pass sent to it (those of a failed INSERT too), and below them,
// down to the earliest timestamp its target answers for
// (pipeline.Target.From), whatever an earlier pass loaded and stopped
// before its commit (the retention floor may have moved since, so that no
// later pass reads them again).
type Range struct {
	VariableID   string
	FromMs, ToMs int64
	// Loaded says ToMs is the timestamp of a point the warehouse
	// acknowledged: the variable's newest point is then at or after it.
	// Without it, the newest may lie anywhere from FromMs on.
	Loaded bool
}

// Tables are a warehouse's analyst tables.
type Tables interface {
	// Recompute makes the tables reflect the warehouse's points over
	// ranges. It may be called concurrently by other passes and
	// processes, with overlapping ranges.
	Recompute(ctx context.Context, ranges []Range) error
}

// RangeOf is what a done target leaves the tables, false when nothing:
// from its From up to the start of its window as read (the part the
// retention floor cut off, where an earlier pass may have loaded points no
// read will load again), widened to every row it sent to the warehouse. A
// failed target leaves its range too: the rows it loaded are in the
// warehouse, and so may be those of an INSERT that failed.
func RangeOf(d pipeline.Done) (Range, bool) {
	lo, hi := d.From, max(d.Start, d.StartMs)-1
	if d.Sent > 0 {
		lo, hi = min(lo, d.SentMinTs), max(hi, d.SentMaxTs)
	}
	if hi < lo {
		return Range{}, false
	}
	return Range{VariableID: d.Variable.ID, FromMs: lo, ToMs: hi, Loaded: d.Points > 0 && d.MaxTs == hi}, true
}

// Pace bounds the share of a pass's time spent recomputing while the
// loaders run: after a recompute that took d, the link holds what it is
// handed at least Pace·d more before the next. A recompute reads its
// points under FINAL; run every second beside the streaming INSERTs of a
// backfill it read the fresh, still unmerged parts over and over and
// competed with the inserts for the server's CPU. Fewer, larger statements
// do the same work once. Crash safety is unchanged: marks are still
// written only after the recompute of the rows below them, so a crash
// costs at most the re-read of what the last Pace·d seconds loaded, never
// an inexact row; MaxGap bounds that re-read.
const Pace = 9

// MaxGap is the longest the pacing holds a commit back.
const MaxGap = time.Minute

// Link is the link in front of the marks: each call's targets (and those
// held back) are recomputed, then handed on, unless the pacing holds them
// back; the final call of a pass is never held.
func Link(t Tables) pipeline.Link {
	return pipeline.Link{Stage: Stage, Wrap: func(next pipeline.Committer) pipeline.Committer {
		return &link{tables: t, next: next}
	}}
}

// link is one pass's link: what it holds back, and until when.
type link struct {
	tables    Tables
	next      pipeline.Committer
	held      []pipeline.Done
	notBefore time.Time
}

func (l *link) Commit(ctx context.Context, done []pipeline.Done, final bool) error {
	l.held = append(l.held, done...)
	if !final && time.Now().Before(l.notBefore) {
		return nil
	}
	held := l.held
	l.held = nil
	var ranges []Range
	for _, d := range held {
		if r, ok := RangeOf(d); ok {
			ranges = append(ranges, r)
		}
	}
	if len(ranges) > 0 {
		start := time.Now()
		// Like the loads, the recompute finishes when the run is
		// cancelled: its points are loaded, and the marks wait for it.
		err := l.tables.Recompute(context.WithoutCancel(ctx), ranges)
		l.notBefore = start.Add(min(time.Since(start)*(Pace+1), MaxGap))
		if err != nil {
			return fmt.Errorf("recompute the rollups of %d variables: %w", len(ranges), err)
		}
	}
	return l.next.Commit(ctx, held, final)
}
