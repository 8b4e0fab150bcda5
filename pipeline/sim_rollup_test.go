package pipeline_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/fleetsync/fleetsync/load/analyst"
	. "github.com/fleetsync/fleetsync/pipeline"
)

// The model of the analyst tables. It runs as load/clickhouse's Recompute
// does: each call draws a version, then snapshots what the warehouse holds
// for every hour its ranges cover and each variable's latest row, then
// lands those rows later, other writers and recomputes running in between
// (the scheduler picks); the row of the greatest version is the one FINAL
// keeps. So it checks the versions' argument too: a recompute with a
// greater version took its snapshot later and saw at least as much. An hourly row
// is kept as the points of its hour, which gives count, sum, min, max,
// first and last at once; the latest row as its point's timestamp. What
// it checks is the engine's half: that the ranges handed to the hook,
// through crashes, failed hooks, stopped passes and concurrent writers,
// cover every point the warehouse ends up holding.

const simHourMs = 3600 * 1000

// simHour is the start of ms's hour, as toStartOfHour gives it.
func simHour(ms int64) int64 {
	ms = max(ms, -(1 << 62))
	h := ms - ms%simHourMs
	if ms%simHourMs < 0 {
		h -= simHourMs
	}
	return h
}

// simTables are the model analyst tables.
type simTables struct {
	hourly map[string]map[int64]map[int64]float64 // variable → hour → ts → value
	latest map[string]int64                       // variable → ts of its latest row
	// The versions of the rows FINAL keeps, and the clock the versions
	// are drawn from (one host's: every process draws from it).
	hourlyVersion map[string]map[int64]int64
	latestVersion map[string]int64
	clock         int64
	// The rows of the latest snapshot that has landed, per hour and per
	// variable, with the world's store counter at that snapshot: the row
	// FINAL keeps must be as complete as they are (see land).
	hourlySeen map[string]map[int64]simSeen
	latestSeen map[string]simSeenLatest
}

// simSeen is an hourly row as a snapshot taken at store counter snap saw
// it; simSeenLatest a latest row.
type simSeen struct {
	snap int64
	pts  map[int64]float64
}

type simSeenLatest struct {
	snap, ts int64
}

// simRecompute is what one Recompute statement pair read: its version,
// drawn before its snapshot as NextVersion is, and the rows the snapshot
// gives, to land later (an hour without points gives no row).
type simRecompute struct {
	version int64
	// snap is the world's store counter when the snapshot was taken.
	snap   int64
	hours  map[string]map[int64]map[int64]float64
	latest map[string]int64
}

// simRollup is the analyst tables (analyst.Tables) as one process's
// analyst link calls them. A recompute takes no virtual time (the
// scheduler lets none pass while the committer is parked), so the link's
// pacing never holds anything here: load/analyst's tests, on synctest's
// clock, are what check the hold.
type simRollup struct{ p *simProc }

func (r simRollup) Recompute(_ context.Context, touched []analyst.Range) (err error) {
	defer func() {
		if err != nil {
			r.p.w.mu.Lock()
			r.p.recomputeFailed = true
			r.p.w.mu.Unlock()
		}
	}()
	w := r.p.w
	content := sortedIDs(touched, func(t analyst.Range) string { return t.VariableID })
	w.sched.call("rollup " + content)
	w.mu.Lock()
	if err := r.p.write("rollup", content, "rollup"); err != nil {
		w.mu.Unlock()
		return err
	}
	r.p.moment(featAtCommit, "rollup", content, touchedIDs(touched), 0, 0)
	// The hourly and latest statements are separate: either may fail
	// after the other landed.
	failHourly, failLatest := false, false
	level := w.cfg.level(faultRollup)
	switch x := w.draw("rollup", content) % 1000; {
	case !w.quiet && float64(x) < 20*level:
		failHourly = true
	case !w.quiet && float64(x) < 40*level:
		failLatest = true
	}
	// As load/clickhouse's Recompute: the version first, then the
	// statements' snapshot of datapoints, then their rows land, other
	// writers and recomputes running in between; FINAL keeps the row of
	// the greatest version, whatever order they land in.
	w.tables.init()
	w.tables.clock++
	rc := simRecompute{version: w.tables.clock, hours: map[string]map[int64]map[int64]float64{}, latest: map[string]int64{}}
	w.mu.Unlock()
	w.sched.call("rollup snapshot " + content)
	w.mu.Lock()
	snapped := w.stores
	rc.snap = snapped
	// The newest row this process stored for each variable, as the
	// snapshot holds it: the latest row that lands must be at least that.
	newest := map[string]int64{}
	for _, t := range touched {
		if !failHourly {
			rc.hours[t.VariableID] = w.snapshotHours(t.VariableID, simHour(t.FromMs), simHour(t.ToMs)+simHourMs)
		}
		if ts := r.p.stored[t.VariableID]; len(ts) > 0 {
			newest[t.VariableID] = slices.Max(ts)
		}
		if !failLatest {
			from := simHour(t.FromMs)
			if t.Loaded {
				from = simHour(t.ToMs)
			}
			if ts, ok := w.snapshotLatest(t.VariableID, from); ok {
				rc.latest[t.VariableID] = ts
			}
		}
	}
	long := w.draw("rollup/long", content) % 8
	w.mu.Unlock()
	// The statements run a while: other writers and recomputes may
	// land first.
	for range long {
		w.sched.call("rollup runs " + content)
	}
	w.sched.call("rollup lands " + content)
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.p.dead && w.draw("rollup/dead-lands", content)%2 == 0 {
		return &simError{msg: "rollup: connection reset (process stopped)", retryable: true}
	}
	w.land(rc)
	if !failLatest && !r.p.dead && !r.p.halted && !r.p.recomputeFailed {
		// Every row the process stored for a variable it hands here was
		// in a range it handed before, or is in this one: the latest row
		// is read from where the range says the newest point can be (its
		// end's hour when the range is Loaded, its start's otherwise), so
		// it holds the newest of them. (Earlier recomputes of the process
		// all succeeded, and a later version saw at least as much.)
		for _, id := range slices.Sorted(maps.Keys(newest)) {
			if latest, ok := w.tables.latest[id]; !ok || latest < newest[id] {
				w.violate("%s's recompute of %s landed, and its latest row is at %s ms (present: %v), below the row the process stored at %s ms",
					r.p.name, id, fmtRel(latest), ok, fmtRel(newest[id]))
			}
		}
	}
	if r.p.dead {
		return &simError{msg: "rollup: connection reset (process stopped)", retryable: true}
	}
	if !failHourly {
		r.p.rolled(touched, snapped)
	}
	if failHourly || failLatest {
		return &simError{msg: "rollup: INSERT failed", retryable: true}
	}
	return nil
}

func (t *simTables) init() {
	if t.hourly == nil {
		t.hourly, t.latest = map[string]map[int64]map[int64]float64{}, map[string]int64{}
		t.hourlyVersion, t.latestVersion = map[string]map[int64]int64{}, map[string]int64{}
		t.hourlySeen, t.latestSeen = map[string]map[int64]simSeen{}, map[string]simSeenLatest{}
	}
}

// snapshotHours are the rows of the hours [lo, hi) of id from its stored
// points now; an hour without points gets no row (INSERT ... SELECT writes
// none). Caller holds w.mu.
func (w *simWorld) snapshotHours(id string, lo, hi int64) map[int64]map[int64]float64 {
	fresh := map[int64]map[int64]float64{}
	for ts, v := range w.stored[id] {
		if ts < lo || ts >= hi {
			continue
		}
		h := simHour(ts)
		if fresh[h] == nil {
			fresh[h] = map[int64]float64{}
		}
		fresh[h][ts] = v
	}
	return fresh
}

// snapshotLatest is id's newest stored point at or after from now, when
// it has one. Caller holds w.mu.
func (w *simWorld) snapshotLatest(id string, from int64) (int64, bool) {
	newest, ok := int64(0), false
	for ts := range w.stored[id] {
		if ts >= from && (!ok || ts > newest) {
			newest, ok = ts, true
		}
	}
	return newest, ok
}

// land stores a recompute's rows where its version is greater than the
// row's FINAL keeps. Caller holds w.mu.
func (w *simWorld) land(rc simRecompute) {
	w.tables.init()
	for id, hours := range rc.hours {
		if w.tables.hourly[id] == nil {
			w.tables.hourly[id], w.tables.hourlyVersion[id] = map[int64]map[int64]float64{}, map[int64]int64{}
		}
		if w.tables.hourlySeen[id] == nil {
			w.tables.hourlySeen[id] = map[int64]simSeen{}
		}
		for h, pts := range hours {
			if rc.version > w.tables.hourlyVersion[id][h] {
				w.tables.hourly[id][h], w.tables.hourlyVersion[id][h] = pts, rc.version
			}
			if seen, ok := w.tables.hourlySeen[id][h]; !ok || rc.snap >= seen.snap {
				w.tables.hourlySeen[id][h] = simSeen{snap: rc.snap, pts: pts}
			}
			// The versions' argument, at every landing: the row kept is
			// as complete as the latest snapshot that has landed (points
			// are never deleted, so a later snapshot holds every point an
			// earlier one held). A version drawn after the snapshot, or
			// at landing, breaks it when two recomputes interleave.
			if seen := w.tables.hourlySeen[id][h]; !maps.Equal(w.tables.hourly[id][h], seen.pts) {
				w.violate("%s's hourly row of hour %+d h holds %d points after a recompute landed, though a snapshot that landed saw %d: a recompute that saw less won (versions)",
					id, (h-simHour(simStart))/simHourMs, len(w.tables.hourly[id][h]), len(seen.pts))
			}
		}
	}
	for id, ts := range rc.latest {
		if rc.version > w.tables.latestVersion[id] {
			w.tables.latest[id], w.tables.latestVersion[id] = ts, rc.version
		}
		if seen, ok := w.tables.latestSeen[id]; !ok || rc.snap >= seen.snap {
			w.tables.latestSeen[id] = simSeenLatest{snap: rc.snap, ts: ts}
		}
		if seen := w.tables.latestSeen[id]; w.tables.latest[id] != seen.ts {
			w.violate("%s's latest row is at %+d ms after a recompute landed, though a snapshot that landed saw %+d ms: a recompute that saw less won (versions)",
				id, w.tables.latest[id]-simStart, seen.ts-simStart)
		}
	}
}

// rolled notes that p's hourly rows of touched landed from a snapshot
// taken when the world's store counter was snapped: the rows p stored in
// their hours before then are covered. Caller holds w.mu.
func (p *simProc) rolled(touched []analyst.Range, snapped int64) {
	for _, t := range touched {
		lo, hi := simHour(t.FromMs), simHour(t.ToMs)+simHourMs
		for ts, at := range p.unrolled[t.VariableID] {
			if ts >= lo && ts < hi && at <= snapped {
				delete(p.unrolled[t.VariableID], ts)
			}
		}
	}
}

// orphan records, as p's run ends, the rows it stored that none of its
// hourly recomputes covered: it stopped or failed between its load and
// its recompute. Its marks stayed where they were, so the next read of
// those windows loads the rows again and hands their hours to the hook,
// unless another run, overlapping it, committed a mark beyond them
// first; then no read is bound to come back to a point stamped below the
// lookback of the mark in force when it was written (a point the
// contract does not promise to load), and its hour stays without it
// until `fleetsync rollup` or `verify --repair` covers it
// (docs/reliability.md, "Crashes"). A point the contract promises is
// read again, but only by the variable's next re-read when the mark moved
// past it (reads after the mark start above it): until a re-read begun
// after the run ended has landed, it may be missing too, and for good
// when it fell out of the retention window (less fleetsync's margin), and
// below that re-read's range, before the re-read began: then it is no
// longer promised. checkTables
// allows exactly those points to be missing from their rows. Caller
// holds w.mu.
func (w *simWorld) orphan(p *simProc) {
	if !p.halted && !p.recomputeFailed {
		// Nothing killed it between a load and the recompute after: every
		// row it stored, acknowledged or in an INSERT that failed, was in
		// a range it handed the tables.
		for _, id := range slices.Sorted(maps.Keys(p.unrolled)) {
			if rows := p.unrolled[id]; len(rows) > 0 {
				ts := slices.Min(slices.Collect(maps.Keys(rows)))
				w.violate("%s ended without being killed or a failed recompute, and %d rows it stored for %s (the first at %s ms) are in no range it handed the analyst tables",
					p.name, len(rows), id, fmtRel(ts))
				return
			}
		}
	}
	for id, rows := range p.unrolled {
		for ts := range rows {
			if w.orphans == nil {
				w.orphans = map[string]map[int64]int64{}
			}
			if w.orphans[id] == nil {
				w.orphans[id] = map[int64]int64{}
			}
			w.orphans[id][ts] = w.runs
		}
	}
}

// unpromisedOrphan says whether v's stored point at ts may be missing
// from its hourly row (see orphan). Caller holds w.mu.
func (w *simWorld) unpromisedOrphan(v *simVar, ts int64) bool {
	orphaned, ok := w.orphans[v.id][ts]
	if !ok {
		return false
	}
	if rr, ok := w.rereads[v.id]; !ok || rr.run <= orphaned {
		return true
	}
	// A point out of reach when the first re-read begun after the dying
	// run began, and below the range that re-read handed the tables (the
	// mark it was planned with starts its window above the point), is
	// promised no more: no read loads it again, nor hands its hour on.
	for _, rr := range w.rereadLog[v.id] {
		if rr.run > orphaned {
			if ts < rr.reach && ts < rr.from {
				return true
			}
			break
		}
	}
	i, ok := slices.BinarySearchFunc(v.points, ts, func(p simPoint, t int64) int { return cmpInt(p.ts, t) })
	return ok && v.points[i].ts < v.points[i].from
}

// rowHolds says whether an hourly row's points are v's stored points of
// the hour but for unpromised orphans (see orphan).
func (w *simWorld) rowHolds(v *simVar, row, stored map[int64]float64) bool {
	for ts, val := range row {
		if s, ok := stored[ts]; !ok || s != val {
			return false
		}
	}
	for ts := range stored {
		if _, ok := row[ts]; !ok && !w.unpromisedOrphan(v, ts) {
			return false
		}
	}
	return true
}

// checkTables compares the model tables with the aggregates of every point
// the warehouse holds, of every variable the source still has. A variable
// deleted in the source is left out: points a stopped pass loaded for it
// are never handed to the hook again (verify finds and repairs those
// hours). Caller holds w.mu.
func (w *simWorld) checkTables(when string) {
	for _, v := range w.vars {
		if v.deleted {
			continue
		}
		stored := w.stored[v.id]
		want := map[int64]map[int64]float64{}
		var newest int64
		for ts, val := range stored {
			h := simHour(ts)
			if want[h] == nil {
				want[h] = map[int64]float64{}
			}
			want[h][ts] = val
			newest = max(newest, ts)
		}
		got := w.tables.hourly[v.id]
		var wrong []string
		for h, pts := range want {
			if !w.rowHolds(v, got[h], pts) {
				wrong = append(wrong, fmt.Sprintf("hour %+d h: %d points in the row, %d stored", (h-simHour(simStart))/simHourMs, len(got[h]), len(pts)))
			}
		}
		for h := range got {
			if want[h] == nil {
				wrong = append(wrong, fmt.Sprintf("hour %+d h: a row, no point stored", (h-simHour(simStart))/simHourMs))
			}
		}
		if len(wrong) > 0 {
			slices.Sort(wrong)
			w.violate("%s, %s's hourly rows differ from its stored points (mark %+v): %s", when, v.id, w.marks[v.id], strings.Join(wrong, "; "))
		}
		if latest, ok := w.tables.latest[v.id]; len(stored) > 0 && (!ok || latest != newest) {
			w.violate("%s, %s's latest row is at %+d ms (present: %v), its newest stored point at %+d ms", when, v.id, latest-simStart, ok, newest-simStart)
		}
	}
}

// liveVariables are the source's live variables as a walk lists them.
func (w *simWorld) liveVariables() []Variable {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Variable
	for _, v := range w.live() {
		out = append(out, Variable{ID: v.id, Label: "l" + v.id, DeviceID: v.device, DeviceLabel: "dev-" + v.device})
	}
	return out
}

// rebuild is `fleetsync rollup --from --to` (load/clickhouse's Rebuild):
// every hour of the range, of every variable the warehouse holds points
// of there, and those variables' latest rows, recomputed from what the
// warehouse holds, as Recompute does: a version, a snapshot, then the rows
// land, the scheduler letting cycles run in between; the statements
// run for long statements' turns of the scheduler between the snapshot
// and the landing (a big range's INSERT ... SELECT takes a while).
func (w *simWorld) rebuild(p *simProc, from, to int64, long int) error {
	w.sched.call(fmt.Sprintf("rollup --from %+d --to %+d", from-simStart, to-simStart))
	w.mu.Lock()
	if err := p.write("rebuild", fmt.Sprint(from, to), "rollup"); err != nil {
		w.mu.Unlock()
		return err
	}
	w.tables.init()
	w.tables.clock++
	rc := simRecompute{version: w.tables.clock, hours: map[string]map[int64]map[int64]float64{}, latest: map[string]int64{}}
	w.mu.Unlock()
	w.sched.call("rollup snapshot of the range")
	w.mu.Lock()
	lo, hi := simHour(from), simHour(to)+simHourMs
	rc.snap = w.stores
	for id, pts := range w.stored {
		in := false
		for ts := range pts {
			if ts >= lo && ts < hi {
				in = true
				break
			}
		}
		if !in {
			continue
		}
		rc.hours[id] = w.snapshotHours(id, lo, hi)
		if ts, ok := w.snapshotLatest(id, math.MinInt64); ok {
			rc.latest[id] = ts
		}
	}
	w.mu.Unlock()
	for range long {
		w.sched.call("rollup of the range runs")
	}
	w.sched.call("rollup of the range lands")
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.dead {
		return &simError{msg: "rollup: connection reset (process stopped)", retryable: true}
	}
	w.land(rc)
	return nil
}
