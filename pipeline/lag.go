package pipeline

import (
	"context"
	"sort"
	"time"

	"go.uber.org/zap"
)

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
		if v, ok := settledOf(m, ok, floor, end, lookbackMs(s.opts.Lookback)); ok && (!sum.hasSettled || v < sum.settled) {
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
// raises. Neither HwmMs nor, under one lookback, RereadMs of a variable's
// stored mark ever moves backwards (MergeMark keeps the greater of each),
// so neither does windowFrom, nor the value, also where a run that
// outlived the mark it was planned with commits the greater mark (a
// backfill through several cycles, two cycles the lease failed to keep
// apart); a changed sync.lookback moves it, as raising it lowers it
// anyway. A variable without
// points is left out: its first points are loaded wherever they are
// stamped (they are owed from the floor), as are those of a variable new
// to the fleet.
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
