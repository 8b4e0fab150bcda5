package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
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

// ScopeResolver is the part of a Source that resolves group and organization
// scopes to device ids.
type ScopeResolver interface {
	GroupDeviceIDs(ctx context.Context, group string) ([]string, error)
	OrganizationDeviceIDs(ctx context.Context, org string) ([]string, error)
}

// MetadataWriter stores the metadata snapshot of each cycle.
type MetadataWriter interface {
	WriteDevices(ctx context.Context, devices []Device, syncedAt time.Time) error
	WriteVariables(ctx context.Context, vars []Variable, syncedAt time.Time) error
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
	// ShardIndex and ShardCount split the variables across workers.
	ShardIndex, ShardCount int
	Scope                  Scope
	LagThreshold           time.Duration
	// PerDeviceVariables makes the walk list each device's variables even
	// when the source can list the account's at once (VariableLister).
	PerDeviceVariables bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Syncer runs sync cycles and backfills.
type Syncer struct {
	src  Source
	w    Writer
	meta MetadataWriter
	st   StateStore
	log  *zap.Logger
	m    *Metrics
	opts SyncOptions
}

// NewSyncer wires a Syncer. meta, logger and metrics may be nil.
func NewSyncer(src Source, w Writer, meta MetadataWriter, st StateStore, opts SyncOptions, logger *zap.Logger, m *Metrics) *Syncer {
	if logger == nil {
		logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if m != nil {
		m.lagThreshold.Set(opts.LagThreshold.Seconds())
	}
	return &Syncer{src: src, w: w, meta: meta, st: st, log: logger, m: m, opts: opts}
}

// Summary reports one cycle or backfill.
type Summary struct {
	Started   time.Time
	Duration  time.Duration
	Devices   int
	Variables int
	Skipped   int
	Targets   int
	Completed int
	Points    int64
	Requests  int64
	Splits    int64
	Failed    []*TargetError
	// FloorMovedTo is set when the service's retention was shorter than
	// configured and the floor moved forward.
	FloorMovedTo time.Time
	LagMax       time.Duration
	Lagging      int
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
	if s.m != nil {
		s.m.lastCycleStart.Set(float64(now.UnixNano()) / 1e9)
	}
	err := s.cycle(ctx, now, &sum)
	sum.Duration = s.opts.Now().Sub(now)
	s.observe(&sum, err)
	return sum, err
}

func (s *Syncer) cycle(ctx context.Context, now time.Time, sum *Summary) error {
	devices, vars, err := s.Walk(ctx, s.opts.Scope)
	if err != nil {
		return err
	}
	sum.Devices, sum.Variables = len(devices), len(vars)
	// A *MetadataError (groups, organizations, event logs, deletion flags)
	// must not hold back the points: it is returned after they are synced.
	var metaErr *MetadataError
	if s.meta != nil {
		if err := s.writeMetadata(ctx, devices, vars, now); err != nil && !errors.As(err, &metaErr) {
			return err
		}
	}
	marks, err := s.st.Load(ctx)
	if err != nil {
		return fmt.Errorf("load marks: %w", err)
	}
	floor := s.Floor(now)
	targets, skipped := Plan(vars, marks, PlanOptions{
		Lookback: s.opts.Lookback, Floor: floor, End: now.UnixMilli(), SkipIdle: s.opts.SkipIdle, IdleRecheck: s.opts.IdleRecheck,
		ShardIndex: s.opts.ShardIndex, ShardCount: s.opts.ShardCount,
	})
	sum.Skipped = skipped
	s.log.Info("cycle planned", zap.Int("devices", len(devices)), zap.Int("variables", len(vars)),
		zap.Int("to_read", len(targets)), zap.Int("idle", skipped), zap.String("floor", msTime(floor)))
	res := s.runEngine(ctx, targets, floor, IncrementalMark)
	s.absorb(sum, res)
	if res.CommitErr != nil {
		return res.CommitErr
	}
	if err := s.lag(ctx, vars, now, sum); err != nil {
		s.log.Warn("computing sync lag failed", zap.Error(err))
	}
	if metaErr != nil {
		return metaErr
	}
	return nil
}

func (s *Syncer) absorb(sum *Summary, res RunResult) {
	sum.Targets, sum.Completed = res.Targets, res.Completed
	sum.Points, sum.Requests, sum.Splits = res.Points, res.Requests, res.Splits
	sum.Failed = res.Failed
	if res.FloorMovedTo != 0 {
		sum.FloorMovedTo = time.UnixMilli(res.FloorMovedTo).UTC()
		if s.m != nil {
			s.m.retentionFloorMoved.Inc()
		}
	}
}

// Backfill re-extracts [from, to] (POSIX ms, inclusive) for the in-scope
// variables, or those of the given devices. A mark moves only where the
// backfill joined up with it: when the backfilled range starts at or below
// the mark, everything up to the new mark is loaded.
func (s *Syncer) Backfill(ctx context.Context, from, to int64, devices []string) (Summary, error) {
	now := s.opts.Now()
	sum := Summary{Started: now}
	scope := s.opts.Scope
	if len(devices) > 0 {
		scope = Scope{Devices: devices}
	}
	_, vars, err := s.Walk(ctx, scope)
	if err != nil {
		return sum, err
	}
	sum.Variables = len(vars)
	marks, err := s.st.Load(ctx)
	if err != nil {
		return sum, fmt.Errorf("load marks: %w", err)
	}
	floor := s.Floor(now)
	start, end := max(from, floor), min(to, now.UnixMilli())
	if start > end {
		return sum, fmt.Errorf("backfill range %s..%s lies outside the retention window (from %s) or in the future", msTime(from), msTime(to), msTime(floor))
	}
	var targets []Target
	for _, v := range vars {
		if !InShard(v.ID, s.opts.ShardIndex, s.opts.ShardCount) {
			continue
		}
		m, ok := marks[v.ID]
		targets = append(targets, Target{Variable: v, Start: start, End: end, Mark: m, HasMark: ok})
	}
	markFn := func(t Target, o Outcome) (Mark, bool) {
		joined := (t.HasMark && t.Start <= t.Mark.HwmMs) || (!t.HasMark && t.Start <= floor)
		if !joined || o.MaxTs <= t.Mark.HwmMs {
			return Mark{}, false
		}
		// A backfill reads a closed range and says nothing of what came
		// after it: the read position and lastActivity of the last cycle
		// stay as they were.
		m := t.Mark
		m.VariableID, m.HwmMs, m.UpdatedAt = t.Variable.ID, o.MaxTs, time.Now().UTC()
		return m, true
	}
	res := s.runEngine(ctx, targets, floor, markFn)
	s.absorb(&sum, res)
	sum.Duration = s.opts.Now().Sub(now)
	return sum, res.CommitErr
}

// VariableLister is a Source that can also list every variable of the
// account at once, in a few pages rather than one request per device. The
// spec does not show that such a listing names each variable's device, so
// a variable whose DeviceID is empty means the listing cannot be used.
type VariableLister interface {
	AllVariables(ctx context.Context, fn func(Variable) error) error
}

// errUnattributed stops an account-wide variable listing at the first
// variable that does not name a device of the device list.
var errUnattributed = errors.New("a variable names no listed device")

// Walk lists the in-scope devices and their variables.
func (s *Syncer) Walk(ctx context.Context, scope Scope) ([]Device, []Variable, error) {
	keep, err := s.scopeFilter(ctx, scope)
	if err != nil {
		return nil, nil, err
	}
	seenDev := make(map[string]bool)
	// listed holds every device listed, in scope or not, so that the
	// account-wide variable list can be checked against it.
	listed := make(map[string]bool)
	// listDevices pages through the devices and returns those not seen
	// before (a device added while paging can appear on two pages).
	listDevices := func() ([]Device, error) {
		var out []Device
		err := s.src.Devices(ctx, func(d Device) error {
			listed[d.ID] = true
			if keep(d) && !seenDev[d.ID] {
				seenDev[d.ID] = true
				out = append(out, d)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list devices: %w", err)
		}
		return out, nil
	}
	devices, err := listDevices()
	if err != nil {
		return nil, nil, err
	}
	// The account-wide list costs pages of every variable, the per-device
	// one a request per in-scope device: the former wins unless the scope
	// is a small part of the fleet.
	if l, ok := s.src.(VariableLister); ok && !s.opts.PerDeviceVariables && 2*len(devices) >= len(listed) && len(devices) > 0 {
		vars, complete, err := s.accountVariables(ctx, l, devices, listed)
		if err != nil {
			return nil, nil, err
		}
		if complete {
			return devices, vars, nil
		}
		s.log.Info("the account-wide variable list does not name a listed device for every variable (the service does not say, or devices changed meanwhile); listing each device's variables instead")
	}
	devices, perDevice, gone, err := s.deviceVariables(ctx, devices)
	if err != nil {
		return nil, nil, err
	}
	if gone > 0 {
		// A device deleted while the list was paged through shifts the later
		// pages forward, so a device that exists may have been skipped. One
		// more pass picks those up; further churn waits for the next cycle.
		more, err := listDevices()
		if err != nil {
			return nil, nil, err
		}
		more, moreVars, _, err := s.deviceVariables(ctx, more)
		if err != nil {
			return nil, nil, err
		}
		devices, perDevice = append(devices, more...), append(perDevice, moreVars...)
	}
	var vars []Variable
	seen := make(map[string]bool)
	for _, vs := range perDevice {
		for _, v := range vs {
			if !seen[v.ID] {
				seen[v.ID] = true
				vars = append(vars, v)
			}
		}
	}
	return devices, vars, nil
}

// accountVariables lists the variables of the in-scope devices through the
// account-wide list. complete is false, and the caller must list device by
// device, as soon as one variable names no device or a device the device
// list did not have: the service may not name devices at all, or a device
// created or shifted past a page boundary since would be missed.
func (s *Syncer) accountVariables(ctx context.Context, l VariableLister, devices []Device, listed map[string]bool) (vars []Variable, complete bool, err error) {
	inScope := make(map[string]*Device, len(devices))
	for i := range devices {
		inScope[devices[i].ID] = &devices[i]
	}
	seen := make(map[string]bool)
	err = l.AllVariables(ctx, func(v Variable) error {
		if v.DeviceID == "" || !listed[v.DeviceID] {
			return errUnattributed
		}
		d, ok := inScope[v.DeviceID]
		if !ok || seen[v.ID] {
			return nil
		}
		seen[v.ID] = true
		v.DeviceLabel = d.Label
		vars = append(vars, v)
		return nil
	})
	switch {
	case errors.Is(err, errUnattributed):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("list variables: %w", err)
	}
	return vars, true, nil
}

// runEngine runs one engine over targets, with the cycle's retention floor
// and the configured engine options, committing marks as markFn decides.
func (s *Syncer) runEngine(ctx context.Context, targets []Target, floor int64, markFn MarkFunc) RunResult {
	eo := s.opts.Engine
	eo.Floor = floor
	eo.FloorMargin = s.opts.Margin
	return NewEngine(s.src, s.w, s.st, eo, markFn, s.log, s.m).Run(ctx, targets)
}

// deviceVariables lists the variables of each device, with the same
// concurrency as data requests. A device that answers 404 was deleted after
// the device list was read: it is dropped and counted in gone, rather than
// failing the cycle (steady churn would otherwise stop every sync).
func (s *Syncer) deviceVariables(ctx context.Context, devices []Device) (kept []Device, perDevice [][]Variable, gone int, err error) {
	all := make([][]Variable, len(devices))
	errs := ForEach(ctx, len(devices), s.opts.Engine.MaxInFlight, func(i int) error {
		d := devices[i]
		return s.src.Variables(ctx, d, func(v Variable) error {
			v.DeviceID, v.DeviceLabel = d.ID, d.Label
			all[i] = append(all[i], v)
			return nil
		})
	})
	for i, d := range devices {
		switch {
		case IsNotFound(errs[i]):
			s.log.Info("device disappeared during the metadata walk; it is left out of this cycle",
				zap.String("device", d.Label), zap.String("device_id", d.ID))
			gone++
		case errs[i] != nil:
			errs[i] = fmt.Errorf("list variables of device %s (%s): %w", d.Label, d.ID, errs[i])
		default:
			kept = append(kept, d)
			perDevice = append(perDevice, all[i])
		}
		if IsNotFound(errs[i]) {
			errs[i] = nil
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, 0, err
	}
	return kept, perDevice, gone, nil
}

func (s *Syncer) scopeFilter(ctx context.Context, scope Scope) (func(Device) bool, error) {
	if scope.Empty() {
		return func(Device) bool { return true }, nil
	}
	ids := make(map[string]bool)
	if len(scope.Groups)+len(scope.Organizations) > 0 {
		r, ok := s.src.(ScopeResolver)
		if !ok {
			return nil, errors.New("scope by device group or organization needs a source that can list them")
		}
		for _, g := range scope.Groups {
			got, err := r.GroupDeviceIDs(ctx, g)
			if err != nil {
				return nil, fmt.Errorf("resolve device group %s: %w", g, err)
			}
			for _, id := range got {
				ids[id] = true
			}
		}
		for _, o := range scope.Organizations {
			got, err := r.OrganizationDeviceIDs(ctx, o)
			if err != nil {
				return nil, fmt.Errorf("resolve organization %s: %w", o, err)
			}
			for _, id := range got {
				ids[id] = true
			}
		}
	}
	return func(d Device) bool {
		if ids[d.ID] {
			return true
		}
		for _, k := range scope.Devices {
			if k == d.ID || (len(k) > 1 && k[0] == '~' && k[1:] == d.Label) {
				return true
			}
		}
		for _, t := range scope.Tags {
			if slices.Contains(d.Tags, t) {
				return true
			}
		}
		return false
	}, nil
}

// writeMetadata stores the walk's metadata. A SnapshotWriter gets the walk
// whole (it also marks deletions and refreshes groups, organizations and
// event logs); a plain MetadataWriter gets devices and variables.
func (s *Syncer) writeMetadata(ctx context.Context, devices []Device, vars []Variable, now time.Time) error {
	if sw, ok := s.meta.(SnapshotWriter); ok {
		return sw.WriteSnapshot(ctx, Snapshot{Devices: devices, Variables: vars, Scoped: !s.opts.Scope.Empty(), At: now})
	}
	if err := s.meta.WriteDevices(ctx, devices, now); err != nil {
		return fmt.Errorf("store device metadata: %w", err)
	}
	if err := s.meta.WriteVariables(ctx, vars, now); err != nil {
		return fmt.Errorf("store variable metadata: %w", err)
	}
	return nil
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
		vl := VariableLag{Variable: v, Mark: m, HasMark: ok}
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
		if missing {
			vl.Lag = time.Duration(max(lag, 1)) * time.Millisecond
		}
		out = append(out, vl)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Lag > out[j].Lag })
	return out
}

func (s *Syncer) lag(ctx context.Context, vars []Variable, now time.Time, sum *Summary) error {
	marks, err := s.st.Load(ctx)
	if err != nil {
		return err
	}
	lags := Lag(vars, marks, s.Floor(now), s.opts.Now().UnixMilli())
	for _, l := range lags {
		if l.Lag > sum.LagMax {
			sum.LagMax = l.Lag
		}
		if s.opts.LagThreshold > 0 && l.Lag > s.opts.LagThreshold {
			sum.Lagging++
		}
		if s.m != nil {
			s.m.lag.Observe(l.Lag.Seconds())
		}
	}
	if s.m != nil {
		s.m.lagMax.Set(sum.LagMax.Seconds())
		s.m.lagging.Set(float64(sum.Lagging))
	}
	return nil
}

func (s *Syncer) observe(sum *Summary, err error) {
	if s.m == nil {
		return
	}
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
