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

// stageClock times the stages of a cycle, the way node_exporter wraps
// every collector: each stage is a plain function run through it, timed
// into fleetsync_stage_duration_seconds, with fleetsync_stage_success set
// and its end logged at debug level, so that an operator can see which
// stage a slow or failing cycle spent its time in; whether a failed stage
// ends the cycle is the caller's decision. The stages interleave: the walk
// hands each part of the fleet to the metadata, plan, move and lag stages
// as it goes, so each stage's time is summed over the cycle and observed
// once, at its end, with whether any of its parts failed.
type stageClock struct {
	s      *Syncer
	order  []string
	took   map[string]time.Duration
	failed map[string]error
}

func (s *Syncer) newStageClock() *stageClock {
	return &stageClock{s: s, took: map[string]time.Duration{}, failed: map[string]error{}}
}

// run runs fn as part of the named stage.
func (c *stageClock) run(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	start := time.Now()
	err := fn(ctx)
	c.add(name, time.Since(start), err)
	return err
}

// add counts took and err to the named stage.
func (c *stageClock) add(name string, took time.Duration, err error) {
	if _, ok := c.took[name]; !ok {
		c.order = append(c.order, name)
	}
	c.took[name] += took
	if err != nil && c.failed[name] == nil {
		c.failed[name] = err
	}
}

// observe reports each stage run so far.
func (c *stageClock) observe() {
	for _, name := range c.order {
		took, err := c.took[name], c.failed[name]
		c.s.m.stageDuration.WithLabelValues(name).Observe(took.Seconds())
		ok := 1.0
		if err != nil {
			ok = 0
		}
		c.s.m.stageSuccess.WithLabelValues(name).Set(ok)
		c.s.log.Debug("stage done", zap.String("stage", name), zap.Duration("took", took), zap.Error(err))
	}
}
