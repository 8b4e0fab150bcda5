package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
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

func (s *Syncer) cycle(ctx context.Context, now time.Time, sum *Summary) error {
	clk := s.newStageClock()
	defer clk.observe()
	floor := s.Floor(now)
	po := PlanOptions{
		Lookback: s.opts.Lookback, Floor: floor, End: now.UnixMilli(), SkipIdle: s.opts.SkipIdle, IdleRecheck: s.opts.IdleRecheck,
		Shard: s.opts.Shard,
	}
	w := s.newCycleWalk(clk, po, floor)
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

// cycleWalk is the WalkSink of a cycle: it hands each part of the walk to
// the metadata stage, and reads the marks of, plans, moves and measures
// the lag of the variables MoveChunk at a time, so that a cycle holds one
// chunk of the fleet and its marks, never the whole walk or every mark. A chunk's requests
// never mix with the next one's, which costs at most one request a chunk
// that is not full. A retention floor the service moved forward holds for
// the chunks after, and the first failed commit of marks stops the walk,
// as one engine run would stop.
type cycleWalk struct {
	s    *Syncer
	clk  *stageClock
	meta SnapshotRun
	po   PlanOptions
	// floor is the cycle's retention floor, which the lag is computed
	// from even after the service moved the reads' floor forward.
	floor int64
	chunk int
	// pending is the chunk being filled, seen its ids: a variable handed
	// twice within one chunk is planned, counted and measured once. One
	// handed again in a later chunk (a listing that started over, or fell
	// back from the account-wide list to each device's) is planned against
	// the mark its first move committed, read with that chunk's marks,
	// and counted and measured again: telling it apart would take a set of
	// every id of the fleet, which the cycle does not hold. The listing's
	// own paging already drops ids it has handed (fleetapi's keySet), so
	// only a fallback can count a variable twice.
	pending []Variable
	seen    map[string]bool
	// reported is whether a variable walked so far had a lastActivity
	// (see lastActivityReported): until one has, none is skipped as idle.
	reported bool
	devices  int
	vars     int
	toRead   int
	skipped  int
	res      RunResult
	lag      lagSum
	// inSink is the time the walk spent handing on, in the other stages.
	inSink time.Duration
	// plan makes a chunk's targets (nil: planWith, a cycle's plan), and
	// markFn their marks; lagless leaves out the lag stage (a backfill's).
	plan    func(part []Variable, marks *chunkMarks) ([]Target, int)
	markFn  MarkFunc
	lagless bool
}

// DefaultMoveChunk is how many variables a cycle plans and moves at a
// time when SyncOptions.MoveChunk is 0.
const DefaultMoveChunk = 20000

func (s *Syncer) newCycleWalk(clk *stageClock, po PlanOptions, floor int64) *cycleWalk {
	w := &cycleWalk{s: s, clk: clk, po: po, floor: floor, chunk: s.opts.MoveChunk, seen: map[string]bool{}, markFn: IncrementalMark}
	if w.chunk <= 0 {
		w.chunk = DefaultMoveChunk
	}
	return w
}

// run walks scope into w and moves the last chunk. The variables walked
// before a failure are moved all the same (one device whose listing fails
// every cycle must not hold back the last chunk for ever), unless the
// run was cancelled.
func (w *cycleWalk) run(ctx context.Context, scope Scope) error {
	start := time.Now()
	err := w.s.src.Walk(ctx, scope, w)
	w.clk.add(StageWalk, time.Since(start)-w.inSink, err)
	if ctx.Err() == nil {
		if ferr := w.flush(ctx); err == nil {
			err = ferr
		}
	}
	return err
}

func (w *cycleWalk) Devices(ctx context.Context, devices []Device) error {
	defer w.timeSink(time.Now())
	w.devices += len(devices)
	if w.meta == nil {
		return nil
	}
	return w.clk.run(ctx, StageMetadata, func(ctx context.Context) error { return w.meta.Devices(ctx, devices) })
}

func (w *cycleWalk) Variables(ctx context.Context, vars []Variable) error {
	defer w.timeSink(time.Now())
	if w.meta != nil {
		if err := w.clk.run(ctx, StageMetadata, func(ctx context.Context) error { return w.meta.Variables(ctx, vars) }); err != nil {
			return err
		}
	}
	for _, v := range vars {
		if w.seen[v.ID] {
			continue
		}
		w.seen[v.ID] = true
		w.vars++
		// What only the metadata needed is not kept.
		v.Properties, v.Name = nil, ""
		w.pending = append(w.pending, v)
		if len(w.pending) >= w.chunk {
			if err := w.flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *cycleWalk) timeSink(start time.Time) { w.inSink += time.Since(start) }

// flush reads the marks of, plans, moves and measures the lag of the
// pending chunk.
func (w *cycleWalk) flush(ctx context.Context) error {
	if len(w.pending) == 0 {
		return nil
	}
	part := w.pending
	w.pending = w.pending[:0]
	clear(w.seen)
	w.reported = w.reported || lastActivityReported(part)
	w.po.reported = w.reported
	var targets []Target
	var marks *chunkMarks
	if err := w.clk.run(ctx, StagePlan, func(ctx context.Context) (err error) {
		if marks, err = loadChunkMarks(ctx, w.s.st, part); err != nil {
			return fmt.Errorf("load marks: %w", err)
		}
		var skipped int
		if w.plan != nil {
			targets, skipped = w.plan(part, marks)
		} else {
			targets, skipped = planWith(part, marks.get, w.po)
		}
		w.toRead += len(targets)
		w.skipped += skipped
		return nil
	}); err != nil {
		return err
	}
	if len(targets) > 0 {
		var res RunResult
		_ = w.clk.run(ctx, StageMove, func(ctx context.Context) error {
			res = w.s.moveTo(ctx, marks, targets, w.po.Floor, w.markFn)
			return res.err()
		})
		w.res.add(res)
		for _, l := range res.Links {
			w.clk.add(l.Stage, l.Took, l.Err)
		}
		if res.FloorMovedTo != 0 {
			w.po.Floor = max(w.po.Floor, res.FloorMovedTo)
		}
		if res.CommitErr != nil {
			return res.CommitErr
		}
	}
	if w.lagless {
		return nil
	}
	return w.clk.run(ctx, StageLag, func(context.Context) error {
		w.s.lag(part, marks.get, w.floor, &w.lag)
		return nil
	})
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
	w.markFn, w.lagless = BackfillMark(floor, s.opts.Lookback.Milliseconds()), true
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
			hand := min(from, windowFrom(m, ok, s.opts.Lookback.Milliseconds()))
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

// chunkMarks are the marks of a chunk of a cycle's variables, read when
// it is planned and kept as a few integers a variable: the StateStore its
// engine run commits through, which merges each committed mark into them
// as every store does (MergeMark), so that the lag is computed without
// reading them again.
type chunkMarks struct {
	StateStore
	mu    sync.Mutex
	marks map[string]markVals
}

// loadChunkMarks reads the marks of vars from st.
func loadChunkMarks(ctx context.Context, st StateStore, vars []Variable) (*chunkMarks, error) {
	ids := make([]string, len(vars))
	for i, v := range vars {
		ids[i] = v.ID
	}
	c := &chunkMarks{StateStore: st, marks: make(map[string]markVals, len(ids))}
	err := st.MarksOf(ctx, ids, func(m Mark) error {
		c.marks[m.VariableID] = valsOf(m)
		return nil
	})
	return c, err
}

// Commit commits through the store, then merges what it committed.
func (c *chunkMarks) Commit(ctx context.Context, ms []Mark) error {
	if err := c.StateStore.Commit(ctx, ms); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range ms {
		v, ok := c.marks[m.VariableID]
		c.marks[m.VariableID] = valsOf(MergeMark(v.mark(m.VariableID), ok, m))
	}
	return nil
}

// get is the mark of one variable (without UpdatedAt, which a cycle does
// not read).
func (c *chunkMarks) get(id string) (Mark, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.marks[id]
	if !ok {
		return Mark{}, false
	}
	return v.mark(id), true
}

// VariableLag is the lag of one variable.
type VariableLag struct {
	Variable Variable
	Mark     Mark
	HasMark  bool
	Lag      time.Duration
}

// Lag computes each variable's lag: how far the warehouse trails the source,
// as far as the source lets us know. A variable is lagging when a point is
// known to be missing: its lastActivity moved since the last complete read
// (or it has data and no mark yet), or that read saw a point stamped after
// its end whose time has come (FutureMs at or before now). Its lag is the
// greatest of lastActivity minus the high-water mark (or the retention
// floor when nothing was loaded yet), the time since the last complete read
// and the time since the future point fell due; never 0. Otherwise it is 0,
// however old the activity is: an idle device is not lagging, and a late
// point that moves no lastActivity cannot be known of before it is read
// (within sync.idle_recheck). Worst first.
func Lag(vars []Variable, marks map[string]Mark, floor, now int64) []VariableLag {
	out := make([]VariableLag, 0, len(vars))
	for _, v := range vars {
		m, ok := marks[v.ID]
		out = append(out, VariableLag{Variable: v, Mark: m, HasMark: ok, Lag: lagOf(v, m, ok, floor, now)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Lag > out[j].Lag })
	return out
}

// lagOf is one variable's lag (see Lag); ok says it has mark m.
func lagOf(v Variable, m Mark, ok bool, floor, now int64) time.Duration {
	var lag int64
	missing := false
	// An unread variable whose activity predates the retention floor
	// has nothing the service would still serve.
	if v.LastActivityMs != 0 && ((!ok && v.LastActivityMs > floor) || (ok && v.LastActivityMs > m.LastActivityMs)) {
		missing = true
		lag = v.LastActivityMs - max(m.HwmMs, floor)
		if ok && m.CheckedMs > 0 {
			lag = max(lag, now-m.CheckedMs)
		}
	}
	if ok && m.FutureMs != 0 && m.FutureMs <= now {
		missing = true
		lag = max(lag, now-m.FutureMs)
	}
	if !missing {
		return 0
	}
	return time.Duration(max(lag, 1)) * time.Millisecond
}

// lagSum is what the lag stage gathers over a cycle's chunks.
type lagSum struct {
	max     time.Duration
	lagging int
	// settled is the least settledOf of the variables that hold points,
	// when any does.
	settled    int64
	hasSettled bool
}

// lag is the lag stage over one chunk: each variable's lag (see Lag) from
// the cycle's marks, observed one by one rather than listed.
func (s *Syncer) lag(vars []Variable, marks func(id string) (Mark, bool), floor int64, sum *lagSum) {
	end := s.opts.Now().UnixMilli()
	for _, v := range vars {
		m, ok := marks(v.ID)
		l := lagOf(v, m, ok, floor, end)
		sum.max = max(sum.max, l)
		if s.opts.LagThreshold > 0 && l > s.opts.LagThreshold {
			sum.lagging++
		}
		s.m.lag.Observe(l.Seconds())
		if v, ok := settledOf(m, ok, floor, end, s.opts.Lookback.Milliseconds()); ok && (!sum.hasSettled || v < sum.settled) {
			sum.settled, sum.hasSettled = v, true
		}
	}
}

// settledOf is the earliest timestamp a later cycle may load for a
// variable with mark m (ok false: none), false for a variable that holds
// no point yet: its next read starts at the lookback of its mark, or
// earlier where the mark still owes points (windowFrom), never below the
// retention floor. A mark ahead of the clock is read from the lookback
// before the cycle's end (planEach), which a later cycle's end only
// raises. Marks never move backwards, nor does windowFrom of a variable's
// marks (a read owes from the lookback of a mark at least as far as the
// one it was planned with; a backfill keeps what its mark owed), so
// neither does the value. A variable without points is left out: its
// first points are loaded wherever they are stamped (they are owed from
// the floor), as are those of a variable new to the fleet.
func settledOf(m Mark, ok bool, floor, now, lookbackMs int64) (int64, bool) {
	if !ok || m.HwmMs <= 0 {
		return 0, false
	}
	return max(floor, min(windowFrom(m, true, lookbackMs), now-lookbackMs)), true
}

// publishWatermark sets the settled-watermark gauge and, when a writer is
// wired, records it: the least settledOf of the cycle's variables, below
// which no later cycle loads a point of a variable the walk listed with
// points. A walk that listed no such variable publishes nothing (an empty
// listing says nothing of the variables it did not list). A failure to
// record it is logged, not the cycle's: the points are synced, and the
// next cycle records a watermark again.
func (s *Syncer) publishWatermark(ctx context.Context, l *lagSum, sum *Summary) {
	if !l.hasSettled {
		return
	}
	sum.SettledBefore = l.settled
	s.m.settledBefore.Set(float64(sum.SettledBefore) / 1000)
	if s.stages.Watermark == nil {
		return
	}
	if err := s.stages.Watermark.PublishWatermark(context.WithoutCancel(ctx), s.opts.Shard.Name(), sum.SettledBefore); err != nil {
		s.log.Warn("recording the settled watermark failed; the gauge has it, and the next cycle records it again", zap.Error(err))
	}
}

// observeLag reports a cycle's lag.
func (s *Syncer) observeLag(l *lagSum, sum *Summary) {
	sum.LagMax, sum.Lagging = l.max, l.lagging
	s.m.lagMax.Set(sum.LagMax.Seconds())
	s.m.lagging.Set(float64(sum.Lagging))
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
