package pipeline

import (
	"context"
	"fmt"
	"math"
	"time"
)

// This file is the whole of what the engine knows of the analyst tables:
// before each commit of marks it hands the Rollup hook what the warehouse
// may hold that the tables do not reflect yet. Hours, aggregates and how
// they are kept exact live behind the hook (load/clickhouse).

// StageRollup is the label the hook's time is measured under. It runs
// inside the move stage, each time the committer writes marks.
const StageRollup = "rollup"

// Touched is one variable's range of timestamps (POSIX ms, inclusive)
// where the warehouse may hold points the analyst tables do not reflect
// yet: the points a pass loaded, and below them, down to the start of the
// variable's window before the retention floor clamped it, whatever an
// earlier pass loaded and stopped before its commit (the floor has moved
// since, so no later pass reads them again; see Target.From).
type Touched struct {
	VariableID   string
	FromMs, ToMs int64
	// Loaded says ToMs is the timestamp of a point the warehouse
	// acknowledged: the variable's newest point is then at or after it.
	// Without it, the newest may lie anywhere from FromMs on.
	Loaded bool
}

// touchedOf is what t leaves for the hook once its holds are released,
// false when nothing: the range of its loaded rows widened down to
// t.From, or, when it loaded nothing, the part of its window the floor
// cut off.
func (t *hold) touchedOf() (Touched, bool) {
	switch {
	case t.points > 0:
		return Touched{VariableID: t.Variable.ID, FromMs: min(t.minTs, t.From), ToMs: t.maxTs, Loaded: true}, true
	case t.From < t.Start:
		return Touched{VariableID: t.Variable.ID, FromMs: t.From, ToMs: t.Start - 1}, true
	}
	return Touched{}, false
}

// noMark is Target.From of a variable without a mark: any point of it
// the warehouse holds may be one a stopped pass loaded.
const noMark = math.MinInt64

// rollUp hands touched to the hook (none when nil), timed as StageRollup,
// and returns how long it took.
func rollUp(ctx context.Context, hook Rollup, m *Metrics, touched []Touched) (time.Duration, error) {
	if len(touched) == 0 || hook == nil {
		return 0, nil
	}
	start := time.Now()
	// Like the loads, the hook finishes when the run is cancelled: its
	// points are loaded, and the marks wait for it.
	err := hook.Recompute(context.WithoutCancel(ctx), touched)
	took := time.Since(start)
	m.stageDuration.WithLabelValues(StageRollup).Observe(took.Seconds())
	ok := 1.0
	if err != nil {
		ok = 0
		err = fmt.Errorf("recompute the rollups of %d variables: %w", len(touched), err)
	}
	m.stageSuccess.WithLabelValues(StageRollup).Set(ok)
	return took, err
}
