package pipeline

import "time"

// Outcome is what a completed target's read found.
type Outcome struct {
	// MaxTs is the greatest timestamp loaded (0 when none).
	MaxTs int64
	// FutureMs is the earliest timestamp seen after the target's End, or a
	// lower bound of it when a frame cut by the limit hid it (0 when none).
	// Such points are left for the cycle that ends after them.
	FutureMs int64
	// StartMs is where the read started in the end: the target's Start, or
	// later where the service's retention floor turned out to be (0 when
	// unknown). Nothing below it can be read any more.
	StartMs int64
}

// MergeMark is the never-backwards rule every StateStore applies when a
// commit meets a stored mark: the given mark replaces the stored one
// unless the stored one is further ahead. At equal marks the later read
// (its CheckedMs) wins, whichever committed last; then the later
// UpdatedAt (to the second, as the ClickHouse store keeps it), the later
// LastActivityMs, FutureMs, then the greater RereadMs, RecheckedMs and
// LookbackMs, in the order the ClickHouse store's readers rank its rows;
// the given mark on a tie of all of them (the same mark). The winner is kept
// whole but for its debt (RereadMs, and the LookbackMs it was reckoned
// under), which becomes the greater of the two where one is at or above
// the other for readers of every lookback. A debt D reckoned under L is
// read under X as D - max(0, X - L) (windowFrom), so the loser's is the
// greater for every reader when its RereadMs is, and so is its RereadMs
// plus LookbackMs; then it replaces the winner's, lookback and all. Where
// neither is (the debts cross), the winner's stands: it is never above
// the greater one, so it loses nothing, only re-reads more. Below either
// debt, every point its lookback promised has landed, and none written
// since can be promised there (a point is promised from the lookback of
// the mark in force when it is written, and marks never move backwards),
// so a lower debt is paid. Taking the winner's alone would let a run that
// outlived the mark it was planned with (a backfill through several
// cycles, two cycles the lease failed to keep apart, a run planned before
// sync.lookback changed) revive a debt a run beside it had paid, and the
// next re-read would start below a settled watermark published meanwhile.
// Taking the loser's as it is where the winner's lookback is longer would
// claim more than it says: a debt under a shorter lookback speaks only of
// the points that lookback promised. With an unknown lookback (LookbackMs
// 0, a mark from before schema 8) the winner's debt stands.
func MergeMark(stored Mark, ok bool, m Mark) Mark {
	if !ok {
		return m
	}
	w, l := m, stored
	if stored.ranksAbove(m) {
		w, l = stored, m
	}
	if w.LookbackMs > 0 && l.LookbackMs > 0 {
		if l.RereadMs != 0 && l.RereadMs >= w.RereadMs && l.RereadMs+l.LookbackMs >= w.RereadMs+w.LookbackMs {
			w.RereadMs, w.LookbackMs = l.RereadMs, l.LookbackMs
		}
	}
	return w
}

// ranksAbove orders two marks of a variable as MergeMark's winner.
func (a Mark) ranksAbove(b Mark) bool {
	x := [...]int64{a.HwmMs, a.CheckedMs, a.UpdatedAt.Unix(), a.LastActivityMs, a.FutureMs, a.RereadMs, a.RecheckedMs, a.LookbackMs}
	y := [...]int64{b.HwmMs, b.CheckedMs, b.UpdatedAt.Unix(), b.LastActivityMs, b.FutureMs, b.RereadMs, b.RecheckedMs, b.LookbackMs}
	for i := range x {
		if x[i] != y[i] {
			return x[i] > y[i]
		}
	}
	return false
}

// MarkFunc decides the mark committed for a completed target. ok false
// commits nothing.
type MarkFunc func(t Target, o Outcome) (m Mark, ok bool)

// IncrementalMark is the MarkFunc of a sync cycle: the mark moves to the
// greatest loaded timestamp, never backwards, and records what the read
// covered: its end (CheckedMs, and RecheckedMs for a re-read), where the
// next re-read must start at the latest (RereadMs), the earliest point it
// saw beyond its end, and the lastActivity the walk saw before it. A
// lastActivity past the read's end is not recorded (the previous one is
// kept): it may stand for a point the read stopped short of, and recording
// it would let the next cycle skip the variable.
//
// A read after the mark that found nothing though lastActivity moved
// records it as any other read does: what moved it lies at or below the
// mark (a late point, under the readings where a late write moves it),
// which the variable's re-read finds within idle_recheck, as it finds the
// late points that move nothing. Asking for a re-read in the next cycle
// instead landed such a point sooner, at a re-read's share of a request
// each time, which a live fleet with late points paid in every cycle.
func IncrementalMark(t Target, o Outcome) (Mark, bool) {
	la := t.Variable.LastActivityMs
	if la > t.End {
		la = t.Mark.LastActivityMs
	}
	// Where the read started in the end bounds what the next re-read can
	// still find (the service's retention floor), except for a read of the
	// new points that started where it was planned: its start is above the
	// debt it leaves as it was.
	rechecked, started := t.End, o.StartMs
	if t.Tail {
		rechecked = lastReread(t.Mark)
		if started <= t.Start {
			started = 0
		}
	}
	return Mark{
		VariableID:     t.Variable.ID,
		HwmMs:          max(t.Mark.HwmMs, o.MaxTs),
		LastActivityMs: la,
		CheckedMs:      t.End,
		FutureMs:       o.FutureMs,
		RereadMs:       max(t.Reread, started),
		RecheckedMs:    rechecked,
		LookbackMs:     t.LookbackMs,
		UpdatedAt:      time.Now().UTC(),
	}, true
}

// BackfillMark is the MarkFunc of a backfill whose reads start no lower
// than floor: a mark moves only where the backfill joined up with what the
// next cycle would read, and then only forwards.
func BackfillMark(floor, lookbackMs int64) MarkFunc {
	return func(t Target, o Outcome) (Mark, bool) {
		// Joined up means the backfill read all that the next cycle would
		// have: from where the mark's next re-read starts (its lookback, or
		// lower where it still owes points: a late point may have landed
		// there since the mark was written), or from the floor. A backfill
		// that started above a debt leaves the mark to the cycles: the
		// mark it would commit would keep that debt, and a cycle beside it
		// may have paid it and published a watermark above it meanwhile.
		joined := t.Start <= floor || t.Start <= windowFrom(t.Mark, t.HasMark, lookbackMs)
		if !joined || o.MaxTs <= t.Mark.HwmMs {
			return Mark{}, false
		}
		// A backfill reads a closed range and says nothing of what came
		// after it: the read position and lastActivity of the last cycle
		// stay as they were. It read what the mark in force owed, and owes
		// what a re-read planned with that mark would: a point written
		// while it ran, from that mark's lookback on (from its start
		// without one).
		m := t.Mark
		m.VariableID, m.HwmMs, m.RereadMs, m.LookbackMs, m.UpdatedAt = t.Variable.ID, o.MaxTs, rereadOf(t.Mark, t.HasMark, lookbackMs, t.Start, t.End), lookbackMs, time.Now().UTC()
		return m, true
	}
}

// KeepMarks is the MarkFunc of verify --repair: it reloads points inside
// the marks and moves none.
func KeepMarks(Target, Outcome) (Mark, bool) { return Mark{}, false }

// futureHorizon is how far past a cycle's end its requests reach, to see
// points stamped ahead of time. The spec's closed range makes an explicit
// end the reading every implementation agrees on; a century is past any
// clock error yet far inside every timestamp type.
const futureHorizon = 100 * 365 * 24 * time.Hour

// earliest is the smaller of two timestamps where 0 means none.
func earliest(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// markVals is a mark as a cycle keeps it for each variable: the integers
// the plan and the lag read (a cycle never reads UpdatedAt, and the id is
// the key).
type markVals struct {
	hwm, lastActivity, checked, future, reread, rechecked, lookback int64
}

func valsOf(m Mark) markVals {
	return markVals{hwm: m.HwmMs, lastActivity: m.LastActivityMs, checked: m.CheckedMs, future: m.FutureMs, reread: m.RereadMs, rechecked: m.RecheckedMs, lookback: m.LookbackMs}
}

func (v markVals) mark(id string) Mark {
	return Mark{VariableID: id, HwmMs: v.hwm, LastActivityMs: v.lastActivity, CheckedMs: v.checked, FutureMs: v.future, RereadMs: v.reread, RecheckedMs: v.rechecked, LookbackMs: v.lookback}
}
