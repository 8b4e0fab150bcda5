package pipeline

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// The stages of a sync cycle, in the order the Syncer runs them; they are
// the stage label of fleetsync_stage_duration_seconds and of the log lines.
const (
	StageWalk     = "walk"     // list the in-scope devices and variables
	StageMetadata = "metadata" // store the fleet's metadata snapshot
	StagePlan     = "plan"     // load the marks and choose each variable's window
	StageMove     = "move"     // read, load and commit the windows (the Engine)
	StageLag      = "lag"      // compute the lag the warehouse is known to have
	StageEvents   = "events"   // sync the event logs
)

// stage runs fn as the named stage of a cycle or backfill, the way
// node_exporter wraps every collector: it times the stage into
// fleetsync_stage_duration_seconds, sets fleetsync_stage_success, and logs
// its end at debug level, so the stages themselves stay plain functions
// and an operator can see which one a slow or failing cycle spent its time
// in. Whether a failed stage ends the cycle is the caller's decision.
func (s *Syncer) stage(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	start := time.Now()
	err := fn(ctx)
	took := time.Since(start)
	s.m.stageDuration.WithLabelValues(name).Observe(took.Seconds())
	ok := 1.0
	if err != nil {
		ok = 0
	}
	s.m.stageSuccess.WithLabelValues(name).Set(ok)
	s.log.Debug("stage done", zap.String("stage", name), zap.Duration("took", took), zap.Error(err))
	return err
}
