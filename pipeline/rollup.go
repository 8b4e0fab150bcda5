package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// StageRollup is the recompute of the analyst tables (datapoints_latest,
// datapoints_hourly) for what a pass loaded. It runs inside the move stage,
// each time the committer writes marks, and is timed under this label.
const StageRollup = "rollup"

// Touched is the range of timestamps (POSIX ms, inclusive) of the points
// loaded for one variable: every hour between FromMs and ToMs is
// recomputed. A range rather than the set of hours keeps collecting it to
// two comparisons per row; an hour inside it that got no new point is
// recomputed to the same row, which costs a little and is never wrong.
type Touched struct {
	VariableID   string
	FromMs, ToMs int64
	// Agg, when not nil, is what the pass loaded for the variable,
	// aggregated: a Rollup may write it instead of recomputing, where the
	// table proves it whole (see Aggregates).
	Agg *Aggregates
}

// widen extends t to cover the span s; first says t holds nothing yet.
func (t *Touched) widen(id string, first bool, s Span) {
	if first {
		*t = Touched{VariableID: id, FromMs: s.MinTsMs, ToMs: s.MaxTsMs}
		return
	}
	t.FromMs = min(t.FromMs, s.MinTsMs)
	t.ToMs = max(t.ToMs, s.MaxTsMs)
}

// Rollup keeps the analyst tables exact: Recompute replaces the rows of
// every hour each Touched range covers, and the latest row of each of its
// variables, with aggregates over the deduplicated points. It is called only
// after ClickHouse acknowledged the points of the ranges, and before their
// marks are committed. It may be called concurrently with disjoint sets of
// variables (see splitHours).
type Rollup interface {
	Recompute(ctx context.Context, touched []Touched) error
}

// splitHours is the loaded hours past which the last commit of a pass
// hands its variables to the Rollup in two halves side by side. That
// commit runs after the last load, when nothing else keeps the server
// busy, and its longest statement, the hourly INSERT, is one server
// thread's work: a backfill's last commit holds the variables of both
// loaders' final INSERTs, 140k hourly rows in a 5 M backfill, and waited
// a quarter of a second for them with one of two cores idle. Below it the
// halves' own parts and statements would cost more than they save, as in
// an incremental cycle's few hours.
const splitHours = 16 << 10

// rollUp recomputes the rollups of touched, timed as StageRollup; split
// asks for two halves side by side. Points are never deleted by fleetsync,
// so an hour never loses points and a recompute only ever replaces rows,
// never has to remove one. It returns how long the recompute took.
func (p *pass) rollUp(ctx context.Context, touched []Touched, split bool) (time.Duration, error) {
	if len(touched) == 0 || p.e.opts.Rollup == nil {
		return 0, nil
	}
	start := time.Now()
	// Like the loads, a rollup finishes when the run is cancelled: its
	// points are loaded, and the marks wait for it.
	ctx = context.WithoutCancel(ctx)
	var err error
	if split && len(touched) > 1 {
		err = p.recomputeHalves(ctx, touched)
	} else {
		err = p.e.opts.Rollup.Recompute(ctx, touched)
	}
	took := time.Since(start)
	p.e.m.stageDuration.WithLabelValues(StageRollup).Observe(took.Seconds())
	// Only the committer calls rollUp; res reads it after the committer ended.
	p.rolledFor += took
	ok := 1.0
	if err != nil {
		ok = 0
		err = fmt.Errorf("recompute the rollups of %d variables: %w", len(touched), err)
	}
	p.e.m.stageSuccess.WithLabelValues(StageRollup).Set(ok)
	return took, err
}

// recomputeHalves hands touched to the Rollup as two halves by variable id,
// side by side: each half's variables are adjacent in the tables' sorting
// key, as one call's would be.
func (p *pass) recomputeHalves(ctx context.Context, touched []Touched) error {
	sorted := slices.Clone(touched)
	slices.SortFunc(sorted, func(a, b Touched) int { return strings.Compare(a.VariableID, b.VariableID) })
	low, high := sorted[:len(sorted)/2], sorted[len(sorted)/2:]
	return SideBySide(
		func() error { return p.e.opts.Rollup.Recompute(ctx, low) },
		func() error { return p.e.opts.Rollup.Recompute(ctx, high) })
}
