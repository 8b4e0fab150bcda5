package pipeline

import (
	"context"
	"fmt"
)

// BackfillVariables re-extracts [from, to] (POSIX ms, inclusive; clamped to
// the retention floor and now) for exactly the given variables, as `verify
// --repair` does for the ones whose counts disagree. Re-read points replace
// the stored ones (same key, newer version). Marks are left alone: the range
// is a repair behind them, and the next cycle continues from where they are.
func (s *Syncer) BackfillVariables(ctx context.Context, vars []Variable, from, to int64) (Summary, error) {
	now := s.opts.Now()
	sum := Summary{Started: now, Variables: len(vars)}
	floor := s.Floor(now)
	start, end := max(from, floor), min(to, now.UnixMilli())
	if start > end {
		return sum, fmt.Errorf("repair range %s..%s lies outside the retention window (from %s) or in the future", msTime(from), msTime(to), msTime(floor))
	}
	targets := make([]Target, 0, len(vars))
	for _, v := range vars {
		targets = append(targets, Target{Variable: v, Start: start, End: end, From: start})
	}
	res := s.move(ctx, targets, floor, KeepMarks)
	s.absorb(&sum, res)
	sum.Duration = s.opts.Now().Sub(now)
	return sum, res.CommitErr
}
