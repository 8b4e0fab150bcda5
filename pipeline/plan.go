package pipeline

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"
)

// Target is one variable to read in a cycle, with its window.
type Target struct {
	Variable Variable
	// Start and End are the window in POSIX ms, both inclusive.
	Start, End int64
	// Mark is the variable's stored mark (zero when it has none).
	Mark    Mark
	HasMark bool
	// From is the earliest timestamp the target answers for: where the
	// window would start without the retention floor (in a cycle the mark
	// minus the lookback, or the mark's RereadMs when that is earlier,
	// noMark without a mark; in a backfill the requested start, or the
	// window of the cycle whose mark it moves). An earlier pass with an
	// older floor may have loaded points down to it and stopped before its
	// commit, so what derives from the warehouse's rows is owed from here
	// (see Done).
	From int64
	// Reread is the Mark.RereadMs a complete read of this target commits:
	// for a re-read, the lookback of the mark in force when the target was
	// planned, or, without a mark, its Start; for a read of the new points
	// (Tail), what the mark in force owed already, which it does not read.
	// Every point written while the read runs is promised from there on
	// (see Mark.RereadMs), so the next re-read starts there at the latest.
	Reread int64
	// LookbackMs is the lookback Reread was reckoned under
	// (Mark.LookbackMs); 0 when the planner did not say.
	LookbackMs int64
	// Tail says the target reads only the points after its mark, between
	// two re-reads of the variable's lookback: it leaves Mark.RecheckedMs
	// as it was and discharges nothing the mark owes below it.
	Tail bool
	// ReadFuture makes the requests reach past End, so that points stamped
	// after it (a device clock ahead, a point written while the cycle runs)
	// are seen: they are not loaded, but the earliest is recorded in the
	// mark (FutureMs) so that the variable is read again once it is due.
	ReadFuture bool
}

// noMark is Target.From of a variable without a mark: any point of it
// the warehouse holds may be one a stopped pass loaded.
const noMark = math.MinInt64

// PlanOptions shape the windows of a cycle.
type PlanOptions struct {
	// Lookback is how far behind each mark a cycle re-reads, for late points.
	Lookback time.Duration
	// Floor is the earliest timestamp a request may reach (POSIX ms): the
	// account's retention limit plus a safety margin.
	Floor int64
	// End is the upper bound of every window (POSIX ms), normally "now".
	End int64
	// SkipIdle drops, between re-reads, variables whose lastActivity
	// equals the one recorded at their last complete read.
	SkipIdle bool
	// IdleRecheck is how often each variable's lookback is re-read: once
	// its last re-read (Mark.RecheckedMs) is this old, the variable is read
	// from min(mark - lookback, Mark.RereadMs), whatever lastActivity says;
	// until then a cycle reads only its points after the mark, and under
	// SkipIdle only when its lastActivity moved or a point it saw stamped
	// ahead fell due. A late point (stamped at or below the mark) waits for
	// the re-read, which the contract allows. The re-read comes at the
	// variable's slot's instant of the period (RecheckAt), so that a fleet
	// synced at once is not re-read at once, and the variables of a slot
	// share re-read requests. 0 means a re-read every cycle.
	IdleRecheck time.Duration
	// VariablesPerRequest is how many variables share a raw-series request
	// (EngineOptions.VariablesPerRequest; 0 means 50): the phases of a
	// part of the fleet fall in one slot per that many variables, so the
	// re-reads of a cycle fill their requests (see RecheckAt).
	VariablesPerRequest int
	// Shard is the shard whose variables are planned (see Shard.Holds).
	Shard Shard
	// reported says whether the fleet reports lastActivity at all (see
	// lastActivityReported); the cycle sets it from the variables walked.
	reported bool
	// slots is the number of re-read slots of the part planned (see
	// RecheckAt); planEach sets it.
	slots int
}

// lastActivityReported says whether the service reports lastActivity at
// all. A variable that never received data has no lastActivity (null). It
// can be skipped like any idle one, but only when the service reports
// lastActivity at all: if it reported none, skipping on "nothing changed"
// would skip everything forever.
func lastActivityReported(vars []Variable) bool {
	for _, v := range vars {
		if v.LastActivityMs != 0 {
			return true
		}
	}
	return false
}

// planWith is Plan over a part of the fleet, o.reported saying whether the
// whole fleet reports lastActivity.
func planWith(vars []Variable, marks func(id string) (Mark, bool), o PlanOptions) (targets []Target, skipped int) {
	skipped = planEach(vars, marks, o, func(t Target) { targets = append(targets, t) })
	return targets, skipped
}

// planEach hands each target of vars to fn and returns the number of
// variables skipped as idle; marks gives a variable's mark.
func planEach(vars []Variable, marks func(id string) (Mark, bool), o PlanOptions, fn func(Target)) (skipped int) {
	lookback := lookbackMs(o.Lookback)
	o.slots = recheckSlots(vars, o)
	for _, v := range vars {
		if !o.Shard.Holds(v.ID) {
			continue
		}
		m, ok := marks(v.ID)
		reread := rereadDue(v, m, ok, o)
		if !reread && o.SkipIdle && o.reported && idle(v, m, o) {
			skipped++
			continue
		}
		if !reread && m.HwmMs > 0 && m.HwmMs < o.End {
			// Its new points alone: what lies at or below the mark was
			// read by the last re-read, or is owed to the next one.
			start := max(o.Floor, m.HwmMs+1)
			owed := windowFrom(m, ok, lookback)
			fn(Target{Variable: v, Start: start, End: o.End, Mark: m, HasMark: ok, From: m.HwmMs + 1,
				Reread: owed, LookbackMs: debtLookback(m, owed, lookback), Tail: true, ReadFuture: true})
			continue
		}
		from := windowFrom(m, ok, lookback)
		start := max(o.Floor, from)
		if start > o.End {
			// A mark in the future (a skewed clock when it was written): re-read
			// the lookback before now instead of nothing at all.
			start = max(o.End-lookback, o.Floor)
		}
		owed := rereadOf(m, ok, lookback, start, o.End)
		fn(Target{Variable: v, Start: start, End: o.End, Mark: m, HasMark: ok, From: from,
			Reread: owed, LookbackMs: debtLookback(m, owed, lookback), ReadFuture: true})
	}
	return skipped
}

// lookbackMs is sync.lookback in ms as marks are reckoned under it: at
// least 1, since a mark's LookbackMs of 0 means "unknown", and the debts
// of a lookback of 0 must merge as those of any other (MergeMark). A
// lookback of 0 then re-reads 1 ms more, which promises nothing less.
func lookbackMs(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// debtLookback is the lookback a read planned under lookback with mark m
// reckons the debt owed under: the mark's own where the read keeps the
// mark's debt as it is and that was reckoned under a lookback no shorter.
// The debt stays as exact as it was: tagged with a shorter lookback, a
// longer one configured later would lower it by more than it must, below
// a settled watermark published under the longer one.
func debtLookback(m Mark, owed, lookback int64) int64 {
	if owed == m.RereadMs && m.LookbackMs >= lookback {
		return m.LookbackMs
	}
	return lookback
}

// windowFrom is where a read of a variable with mark m (ok false: none)
// must start, before the retention floor: the lookback of its mark, or
// earlier where the mark still owes the points written while the read
// that committed it ran (Mark.RereadMs); noMark without a mark. A debt
// reckoned under a shorter lookback than this one (a backfill of an older
// configuration, a lookback raised since) is lowered by the difference:
// it is at most the lookback of the mark it was reckoned from, and points
// written since were promised from that mark's longer lookback.
func windowFrom(m Mark, ok bool, lookbackMs int64) int64 {
	if !ok || m.HwmMs <= 0 {
		return noMark
	}
	from := m.HwmMs - lookbackMs
	if m.RereadMs != 0 {
		owed := m.RereadMs
		if m.LookbackMs > 0 && m.LookbackMs < lookbackMs {
			owed -= lookbackMs - m.LookbackMs
		}
		from = min(from, owed)
	}
	return from
}

// rereadOf is the Mark.RereadMs a complete read of [start, end] commits
// for a variable whose mark in force is m: a point written while the read
// runs is promised from that mark's lookback on, or, without a mark, from
// wherever the read started. The read may pass such a point before it is
// written and then move the mark beyond its lookback. What m owed below
// its lookback the read pays only up to its end: a mark ahead of the end
// (committed by a read that ended later, or under a clock since stepped
// back) still owes the points stamped after it, which this read did not
// reach. Below the value, every point still promised has landed, and no
// point written later can be promised (MergeMark relies on it).
func rereadOf(m Mark, ok bool, lookbackMs, start, end int64) int64 {
	if !ok || m.HwmMs <= 0 {
		return start
	}
	return max(windowFrom(m, ok, lookbackMs), min(m.HwmMs-lookbackMs, end+1))
}

// rereadDue reports whether a variable with mark m (ok false: none) is to
// be re-read from its mark's lookback: it has no mark or no re-read on
// record, its last re-read is ahead of the cycle's end (a clock that was
// ahead, or stepped back since: trusting it would put the re-read off by
// the skew), or the variable's phase of the recheck period (RecheckAt)
// came round since its last re-read. lastActivity is a hint whose meaning
// the spec leaves open (a late point may not move it, nor a point written
// while a read ran), so a point at or below the mark is found by the
// re-read alone, whatever lastActivity says; reading only after the mark
// in between is what keeps a cycle's cost to its new points
// (docs/reliability.md, "Late points").
//
// No variable goes more than idle_recheck between re-reads, whatever its
// phase, and whatever the number of slots (which follows the fleet's size)
// did to its phase meanwhile: RecheckAt lies less than idle_recheck before
// the cycle's end, so a last re-read that long ago is always before it.
func rereadDue(v Variable, m Mark, ok bool, o PlanOptions) bool {
	last := lastReread(m)
	if !ok || last <= 0 || last > o.End || o.IdleRecheck <= 0 {
		return true
	}
	return RecheckAt(v.ID, o.IdleRecheck, o.slots, o.End) > last
}

// recheckSlots is how many slots the phases of vars' re-reads fall in: one
// per VariablesPerRequest of the variables the shard holds, so that each
// slot's re-reads fill about one request. A small fleet is then re-read in
// one cycle a period (one request more, once), a large one a slot's worth
// each cycle; a part of a fleet larger than a cycle's chunk has more slots
// than cycles in a period, which is as even as the spread gets.
func recheckSlots(vars []Variable, o PlanOptions) int {
	per := o.VariablesPerRequest
	if per <= 0 {
		per = defaultVariablesPerRequest
	}
	n := 0
	for _, v := range vars {
		if o.Shard.Holds(v.ID) {
			n++
		}
	}
	return max(1, (n+per-1)/per)
}

// lastReread is the end of m's last re-read, 0 when none is on record. A
// mark written before RecheckedMs existed (schema 6 and older) has none,
// but then every complete read was a re-read: its CheckedMs stands in, so
// that an upgrade does not re-read the whole fleet at once.
func lastReread(m Mark) int64 {
	if m.RecheckedMs != 0 {
		return m.RecheckedMs
	}
	return m.CheckedMs
}

// idle reports whether a variable with mark m, between re-reads, has
// nothing new to read: its lastActivity is the one its last complete read
// recorded, and no point that read saw stamped ahead has fallen due. A
// mark no cycle's read completed (CheckedMs 0) has no re-read on record
// either, so rereadDue has the variable re-read before this is asked.
func idle(v Variable, m Mark, o PlanOptions) bool {
	return v.LastActivityMs == m.LastActivityMs && (m.FutureMs == 0 || m.FutureMs > o.End)
}

// RecheckAt is the latest instant at or before end (POSIX ms) at which
// the variable's phase of the recheck period comes round: its slot (one of
// slots, from a stable hash of its id) times recheck/slots, plus a whole
// number of periods counted from the Unix epoch. A variable whose last
// re-read is older is re-read (rereadDue). Every process reckons the same
// instants from the id, the clock and the slot count (the planned part of
// the fleet's size and variables_per_request), so a daemon, a CronJob's
// runs and each shard keep the variables of a slot together; variables of one
// slot are re-read in the same cycle and share its requests, and the slots
// spread a fleet synced at once over the period. Each variable is re-read
// once a period (sooner only after a re-read off its instant, such as its
// first, or when the slots change): every re-read reads the lookback and
// the time since the last one again.
func RecheckAt(variableID string, recheck time.Duration, slots int, end int64) int64 {
	period := max(recheck.Milliseconds(), 1)
	slots = max(slots, 1)
	phase := int64(recheckFraction(variableID)*float64(slots)) * period / int64(slots)
	return end - floorMod(end-phase, period)
}

// recheckFraction is a stable hash of a variable's id in [0, 1).
func recheckFraction(variableID string) float64 {
	h := fnv.New64a()
	h.Write([]byte(variableID))
	// FNV alone spreads ids that differ in a last digit unevenly; a
	// finalizer (splitmix64's) mixes every bit into the top ones.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / float64(1<<53)
}

// floorMod is a mod m in [0, m) for m > 0, whatever a's sign.
func floorMod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}

// Group packs targets into requests of at most perRequest variables.
// Targets are sorted by window start, and a request's window starts at
// its first target's: a target joins it only when that start lies within
// the target's own slack (see slack: an eighth of its window, a minute for
// shorter ones, never more than the window). So a variable is served a
// little more of its own history, never a neighbour's longer window (a
// variable without a mark
// reads from the retention floor; its active neighbours read their
// lookbacks), and windows of close starts still share a request. The
// request's end is the latest of its targets' (they share one in a cycle
// and in a backfill).
//
// Targets with the same start (all of a backfill's) go in the order of
// their ids, which is datapoints' sorting key: a request's INSERTs then
// make parts of adjacent keys, and the variables a commit hands down the
// chain are adjacent too, so a link that reads their points back (the
// analyst tables' recompute) reads a few granules of every other part
// instead of one per variable (3.6 times the rows it counts, measured on
// a 5 M backfill's parts, against 1.1).
func Group(targets []*targetState, perRequest int) []*request {
	if perRequest < 1 {
		perRequest = 1
	}
	sorted := make([]*targetState, len(targets))
	copy(sorted, targets)
	slices.SortStableFunc(sorted, func(a, b *targetState) int {
		return cmp.Or(cmp.Compare(a.start, b.start), strings.Compare(a.Variable.ID, b.Variable.ID))
	})
	var reqs []*request
	for i := 0; i < len(sorted); {
		n := 1
		for n < perRequest && i+n < len(sorted) && sorted[i+n].start-sorted[i].start <= slack(sorted[i+n]) {
			n++
		}
		part := sorted[i : i+n]
		r := &request{targets: part, start: part[0].start, end: part[0].end}
		for _, t := range part {
			r.end = max(r.end, t.end)
			r.open = r.open || t.ReadFuture
		}
		reqs = append(reqs, r)
		i += n
	}
	return reqs
}

// minSlack is the least a target's window may be widened by to share a
// request (see Group), unless the window is shorter.
const minSlack = 60_000

// slack is how far below its own start a target may be read so as to share
// a request: an eighth of its window, or a minute or the whole window if
// that is shorter. A short window (a cycle's new points under a fast
// schedule) is at most doubled: a neighbour read from a minute back (a
// variable that reports rarely) would otherwise serve it many times its
// own rows in every cycle that neighbour is read.
func slack(t *targetState) int64 {
	w := t.end - t.start
	return max(w/8, min(w, minSlack))
}
