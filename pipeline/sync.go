package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Scope restricts the sync to part of the fleet. Empty fields select all.
// The service ignores filters it does not understand and would then return
// everything, so scope is always applied on our side.
type Scope struct {
	// Devices are device ids or ~labels.
	Devices []string
	// Tags selects devices carrying any of these tags.
	Tags []string
	// Groups are device group ids or ~labels; their member devices are in scope.
	Groups []string
	// Organizations are organization ids or ~labels; their devices are in scope.
	Organizations []string
}

// Empty reports whether the scope selects the whole fleet.
func (s Scope) Empty() bool {
	return len(s.Devices) == 0 && len(s.Tags) == 0 && len(s.Groups) == 0 && len(s.Organizations) == 0
}

// SyncOptions configure cycles and backfills.
type SyncOptions struct {
	Engine EngineOptions
	// Retention is the account's data-retention window; Margin keeps every
	// request that far inside it, so none is rejected for clock drift.
	Retention time.Duration
	Margin    time.Duration
	Lookback  time.Duration
	SkipIdle  bool
	// IdleRecheck bounds how long SkipIdle may skip a variable (see
	// PlanOptions.IdleRecheck).
	IdleRecheck time.Duration
	// Shard is the shard of the account's variables this Syncer reads.
	Shard Shard
	// MoveChunk is how many variables a cycle plans and moves at a time
	// (see moveChunks); 0 means DefaultMoveChunk.
	MoveChunk    int
	Scope        Scope
	LagThreshold time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Stages are the steps of a cycle besides moving the points, each
// optional.
type Stages struct {
	// Metadata stores the walk's metadata: pipeline/metadata's *Refresh
	// also marks deletions and refreshes groups and organizations; its
	// Plain stores devices and variables alone.
	Metadata SnapshotWriter
	// Events syncs the configured events' logs (pipeline/metadata's
	// *EventSync).
	Events EventSyncer
	// Watermark publishes the settled watermark after each complete cycle.
	Watermark WatermarkWriter
}

// WatermarkWriter keeps the settled watermark (see publishWatermark) where
// analysts read it: the contract's sync_watermark table.
type WatermarkWriter interface {
	// PublishWatermark records settledBeforeMs (POSIX ms) for scope: ""
	// for a deployment of one shard, else the shard's name (Shard.Name).
	PublishWatermark(ctx context.Context, scope string, settledBeforeMs int64) error
}

// Syncer runs sync cycles and backfills: the stages of a cycle in order
// (walk, metadata, events, plan, move, lag), each through Syncer.stage.
type Syncer struct {
	src    Source
	w      Writer
	stages Stages
	st     StateStore
	log    *zap.Logger
	m      *Metrics
	opts   SyncOptions
}

// NewSyncer wires a Syncer. logger and metrics may be nil.
func NewSyncer(src Source, w Writer, stages Stages, st StateStore, opts SyncOptions, logger *zap.Logger, m *Metrics) *Syncer {
	if logger == nil {
		logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if m == nil {
		m = unregistered()
	}
	m.lagThreshold.Set(opts.LagThreshold.Seconds())
	return &Syncer{src: src, w: w, stages: stages, st: st, log: logger, m: m, opts: opts}
}

// Summary reports one cycle or backfill.
type Summary struct {
	Started   time.Time
	Duration  time.Duration
	Devices   int
	Variables int
	Skipped   int
	// Moved is the move stage's run's (see RunResult); RowsServedPerLoaded
	// and RequestsPerMinimum the ratios reported, 0 when nothing was read.
	Moved
	RowsServedPerLoaded float64
	RequestsPerMinimum  float64
	// FloorMovedTo is set when the service's retention was shorter than
	// configured and the floor moved forward.
	FloorMovedTo time.Time
	LagMax       time.Duration
	Lagging      int
	// SettledBefore is the settled watermark a complete cycle published
	// (POSIX ms; see publishWatermark), 0 when it published none.
	SettledBefore int64
}

// Floor is the earliest timestamp a request may reach at now.
func (s *Syncer) Floor(now time.Time) int64 {
	return now.Add(-s.opts.Retention).Add(s.opts.Margin).UnixMilli()
}

// Cycle runs one complete sync: metadata walk, plan, extract and load, commit.
// The error is for failures of the whole cycle; failures of single variables
// are in Summary.Failed while the others' progress is kept.
func (s *Syncer) Cycle(ctx context.Context) (Summary, error) {
	now := s.opts.Now()
	sum := Summary{Started: now}
	s.m.lastCycleStart.Set(float64(now.UnixNano()) / 1e9)
	err := s.cycle(ctx, now, &sum)
	sum.Duration = s.opts.Now().Sub(now)
	s.observe(&sum, err)
	return sum, err
}

// planOptions are the windows of a cycle at now with the retention floor
// floor, as the Syncer's options shape them.
func (s *Syncer) planOptions(now time.Time, floor int64) PlanOptions {
	return PlanOptions{
		Lookback: s.opts.Lookback, Floor: floor, End: now.UnixMilli(), SkipIdle: s.opts.SkipIdle, IdleRecheck: s.opts.IdleRecheck,
		VariablesPerRequest: s.opts.Engine.VariablesPerRequest,
		Shard:               s.opts.Shard,
	}
}

func (s *Syncer) cycle(ctx context.Context, now time.Time, sum *Summary) error {
	clk := s.newStageClock()
	defer clk.observe()
	floor := s.Floor(now)
	w := s.newCycleWalk(clk, s.planOptions(now, floor), floor)
	if s.stages.Metadata != nil {
		if err := clk.run(ctx, StageMetadata, func(ctx context.Context) (err error) {
			w.meta, err = s.stages.Metadata.BeginSnapshot(ctx, !s.opts.Scope.Empty(), now)
			return err
		}); err != nil {
			return err
		}
	}
	s.log.Info("cycle planned", zap.String("floor", msTime(floor)), zap.Int("chunk", w.chunk))
	err := w.run(ctx, s.opts.Scope)
	sum.Devices, sum.Variables, sum.Skipped = w.devices, w.vars, w.skipped
	s.absorb(sum, w.res)
	if w.res.CommitErr != nil {
		return w.res.CommitErr
	}
	if err != nil {
		return err
	}
	// Only a complete walk measured every variable: after a failed one,
	// or a cancelled one (whose last chunk is not moved nor measured), the
	// lag gauges and the watermark keep what the last complete cycle
	// found.
	if ctx.Err() == nil {
		s.observeLag(&w.lag, sum)
		s.publishWatermark(ctx, &w.lag, sum)
	}
	s.log.Info("cycle walked", zap.Int("devices", sum.Devices), zap.Int("variables", sum.Variables),
		zap.Int("to_read", w.toRead), zap.Int("idle", sum.Skipped))
	// A *MetadataError (groups, organizations, event logs, deletion flags)
	// does not fail the cycle: it is returned after the points are synced.
	var partial []error
	if w.meta != nil {
		err := clk.run(ctx, StageMetadata, w.meta.Finish)
		var metaErr *MetadataError
		switch {
		case errors.As(err, &metaErr):
			partial = append(partial, metaErr.Errs...)
		case err != nil:
			return err
		}
		if s.stages.Events != nil {
			if err := clk.run(ctx, StageEvents, s.stages.Events.Sync); err != nil {
				partial = append(partial, err)
			}
		}
	}
	if len(partial) > 0 {
		return &MetadataError{Errs: partial}
	}
	return nil
}

func (s *Syncer) absorb(sum *Summary, res RunResult) {
	sum.Moved = res.Moved
	s.m.countRequests.Add(float64(res.CountRequests))
	if distinct := res.Points - res.Reloaded; distinct > 0 {
		sum.RowsServedPerLoaded = float64(res.RowsServed) / float64(distinct)
		s.m.rowsServedPerLoaded.Set(sum.RowsServedPerLoaded)
	}
	if res.MinRequests > 0 && res.Requests > 0 {
		sum.RequestsPerMinimum = float64(res.Requests) / float64(res.MinRequests)
		s.m.requestsPerMinimum.Set(sum.RequestsPerMinimum)
	}
	if res.FloorMovedTo != 0 {
		sum.FloorMovedTo = time.UnixMilli(res.FloorMovedTo).UTC()
		s.m.retentionFloorMoved.Inc()
	}
}

// Backfill re-extracts [from, to] (POSIX ms, inclusive) for the in-scope
// variables, or those of the given devices. A mark moves only where the
// backfill joined up with it: when the backfilled range starts at or below
// the mark's lookback (or the floor), everything up to the new mark is
// loaded, late points behind the mark included.
func (s *Syncer) Backfill(ctx context.Context, from, to int64, devices []string) (Summary, error) {
	now := s.opts.Now()
	sum := Summary{Started: now}
	scope := s.opts.Scope
	if len(devices) > 0 {
		scope = Scope{Devices: devices}
	}
	floor := s.Floor(now)
	start, end := max(from, floor), min(to, now.UnixMilli())
	if start > end {
		return sum, fmt.Errorf("backfill range %s..%s lies outside the retention window (from %s) or in the future", msTime(from), msTime(to), msTime(floor))
	}
	clk := s.newStageClock()
	defer clk.observe()
	// The walk is taken as a cycle takes it, a chunk of variables at a
	// time with their marks, so that a backfill of the whole fleet holds
	// no more of it than a cycle does.
	w := s.newCycleWalk(clk, PlanOptions{Floor: floor, Shard: s.opts.Shard}, floor)
	w.markFn, w.lagless = BackfillMark(floor, lookbackMs(s.opts.Lookback)), true
	w.plan = func(part []Variable, marks *chunkMarks) (targets []Target, skipped int) {
		for _, v := range part {
			if !s.opts.Shard.Holds(v.ID) {
				continue
			}
			m, ok := marks.get(v.ID)
			// A backfill that moves the mark answers for what the next
			// cycle would have from the window it replaces: points a
			// stopped pass loaded there, the floor having passed them
			// since (Target.From), whatever the range.
			hand := min(from, windowFrom(m, ok, lookbackMs(s.opts.Lookback)))
			targets = append(targets, Target{Variable: v, Start: start, End: end, Mark: m, HasMark: ok, From: hand})
		}
		return targets, 0
	}
	err := w.run(ctx, scope)
	sum.Variables = w.vars
	s.absorb(&sum, w.res)
	sum.Duration = s.opts.Now().Sub(now)
	if w.res.CommitErr != nil {
		return sum, w.res.CommitErr
	}
	return sum, err
}

// move is the move stage: one Engine over targets, with the cycle's
// retention floor and the configured engine options, committing marks as
// markFn decides.
func (s *Syncer) move(ctx context.Context, targets []Target, floor int64, markFn MarkFunc) RunResult {
	return s.moveTo(ctx, s.st, targets, floor, markFn)
}

func (s *Syncer) moveTo(ctx context.Context, st StateStore, targets []Target, floor int64, markFn MarkFunc) RunResult {
	eo := s.opts.Engine
	eo.Floor = floor
	eo.FloorMargin = s.opts.Margin
	return NewEngine(s.src, s.w, st, eo, markFn, s.log, s.m).Run(ctx, targets)
}

// add sums another engine run into r.
func (r *RunResult) add(o RunResult) {
	r.Targets += o.Targets
	r.Completed += o.Completed
	r.Points += o.Points
	r.Requests += o.Requests
	r.Splits += o.Splits
	r.CountRequests += o.CountRequests
	r.RowsServed += o.RowsServed
	r.MinRequests += o.MinRequests
	r.Reloaded += o.Reloaded
	r.Failed = append(r.Failed, o.Failed...)
	r.Links = addLinks(r.Links, o.Links)
	if o.FloorMovedTo != 0 {
		r.FloorMovedTo = max(r.FloorMovedTo, o.FloorMovedTo)
	}
	if r.CommitErr == nil {
		r.CommitErr = o.CommitErr
	}
}

// addLinks sums the link times of another run into sum, stage by stage.
func addLinks(sum, o []LinkTime) []LinkTime {
	for _, l := range o {
		i := slices.IndexFunc(sum, func(s LinkTime) bool { return s.Stage == l.Stage })
		if i < 0 {
			sum = append(sum, l)
			continue
		}
		sum[i].Took += l.Took
		if sum[i].Err == nil {
			sum[i].Err = l.Err
		}
	}
	return sum
}

func (s *Syncer) observe(sum *Summary, err error) {
	s.m.cycleDuration.Observe(sum.Duration.Seconds())
	s.m.variablesFailed.Set(float64(len(sum.Failed)))
	s.m.variablesSynced.Set(float64(sum.Variables))
	if err == nil && len(sum.Failed) == 0 {
		s.m.cycles.WithLabelValues("success").Inc()
		s.m.lastCycleSuccess.Set(1)
		s.m.lastSuccess.Set(float64(s.opts.Now().UnixNano()) / 1e9)
		return
	}
	s.m.cycles.WithLabelValues("failure").Inc()
	s.m.lastCycleSuccess.Set(0)
}
