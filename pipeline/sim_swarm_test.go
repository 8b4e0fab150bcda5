package pipeline_test

// The simulation's scenarios (sim_test.go runs them): swarm testing
// (Groce et al., "Swarm Testing", ISSTA 2012), where each seed turns on a
// random subset of the behaviours and faults instead of all of them at
// low rates, so that rare combinations are common in some seed; and the
// timestamps the writes draw: late points over the whole range the
// contract promises, written at any moment of a run, and a share on the
// boundaries where off-by-one bugs live.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/fleetsync/fleetsync/load/analyst"
	. "github.com/fleetsync/fleetsync/pipeline"
)

// simFeature is a behaviour of the service or the fleet, a way of running
// the sync, or a kind of fault, which a seed turns on or off.
type simFeature uint

const (
	// What is written between runs, and at the moments below.
	featNew      simFeature = iota // new points just before now
	featBurst                      // dense bursts: frames cut by the limit
	featLate                       // late points over [mark in force - lookback, now]
	featAhead                      // points stamped ahead of the clock
	featBoundary                   // timestamps where off-by-one bugs live
	featOnce                       // a new variable that reports once
	featDelete                     // deletions of variables and devices
	// The moments of a run at which points are written.
	featAtWalk     // as a walk starts listing
	featDuringRead // as a read of the variable is served
	featAfterRead  // after a read was served, before its commit
	featAtCommit   // at an INSERT, a recompute of the rollups, a commit of marks
	// How the sync runs.
	featClock          // the clock moves with each request of a run, and the service's floor with it
	featBackfill       // backfills, beside a cycle unless alone
	featAlone          // backfills alone, no cycle beside them
	featShards         // two shard counts overlapping
	featCrash          // processes killed or stopped (SIGTERM)
	featSkipIdle       // sync.skip_idle
	featShortRetention // the service keeps less than the configured retention
	featTooLarge       // responses too large for the decoder to hold
	featInterlude      // a quiet cycle and its check between the steps
	featHot            // the writes at a run's moments all go to one chatty variable
	featLookback       // sync.lookback changes between steps; a backfill may keep the one before
	// Faults, each kind on or off.
	faultWalk        // a walk fails
	faultWalkDrop    // shifting pages drop a variable
	faultWalkTwice   // shifting pages list a variable twice
	faultWalkRestart // a listing starts over
	faultWalkPage    // a page fails part way
	faultSeries429   // a raw-series request fails (429, retries spent)
	faultUndecodable // a frame the decoder cannot read
	faultCutBody     // a response body cut mid-stream
	faultAppend      // a write to the warehouse breaks
	faultInsert      // an INSERT fails before, part way or after its rows are stored
	faultMarksLoad   // marks cannot be loaded
	faultMarksCommit // a commit of marks fails, before or after it lands
	faultRollup      // a recompute of the rollups fails
	simFeatureCount
)

var simFeatureNames = [simFeatureCount]string{
	"new", "burst", "late", "ahead", "boundary", "once", "delete",
	"at-walk", "during-read", "after-read", "at-commit",
	"clock", "backfill", "alone", "shards", "crash", "skip-idle", "short-retention", "too-large", "interlude", "hot", "lookback",
	"walk", "walk/drop", "walk/twice", "walk/restart", "walk/page", "series/429", "series/undecodable",
	"series/cut-body", "append", "insert", "marks/load", "marks/commit", "rollup",
}

// simFeatures is the set of features a seed turns on.
type simFeatures uint64

func (s simFeatures) has(f simFeature) bool { return s&(1<<f) != 0 }

func (s simFeatures) String() string {
	var on []string
	for f := range simFeatureCount {
		if s.has(f) {
			on = append(on, simFeatureNames[f])
		}
	}
	return strings.Join(on, ",")
}

// simFaultKinds maps the kinds the models draw faults under to the
// feature that turns them on.
var simFaultKinds = map[string]simFeature{
	"walk": faultWalk, "walk/drop": faultWalkDrop, "walk/twice": faultWalkTwice, "walk/restart": faultWalkRestart,
	"walk/page": faultWalkPage, "series/429": faultSeries429, "series/undecodable": faultUndecodable,
	"series/cut-body": faultCutBody, "append": faultAppend, "marks/load": faultMarksLoad,
}

// level is the scale of the fault kind f's probabilities: the seed's
// fault level when f is on, 0 when off.
func (c simConfig) level(f simFeature) float64 {
	if !c.on.has(f) {
		return 0
	}
	return c.faults
}

// faultOn says whether the fault kind a model draws under is on; a kind
// not in simFaultKinds always is.
func (c simConfig) faultOn(kind string) bool {
	f, ok := simFaultKinds[kind]
	return !ok || c.on.has(f)
}

// simScenario draws a seed's scenario; vars and steps, when positive, cap
// it. Every feature is on with probability one half, skip-idle and the
// interludes three quarters.
func simScenario(seed uint64, vars, steps int) simConfig {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	c := simConfig{
		vars:      1 + r.IntN(10),
		steps:     1 + r.IntN(6),
		rows:      []int{3, 5, 8, 20, 50}[r.IntN(5)],
		perReq:    1 + r.IntN(6),
		inFlight:  1 + r.IntN(3),
		workers:   1 + r.IntN(2),
		batchRows: []int{1, 7, 100, 1 << 20}[r.IntN(4)],
		cut:       simCut(r.IntN(5)),
		order:     simOrder(r.IntN(4)),
		la:        []laReading{laNewestTs, laWriteTime, laWriteTime, laNone, laFrozen, laStale}[r.IntN(6)],
		counts:    countMode(r.IntN(5)),
		faults:    []float64{0.5, 1, 2, 3}[r.IntN(4)],
		moveChunk: []int{0, 1, 2, 3}[r.IntN(4)],
	}
	if r.IntN(2) == 0 {
		// Half the seeds run one fetcher and one loader.
		c.inFlight, c.workers = 1, 1
	}
	for f := range simFeatureCount {
		if r.IntN(2) == 0 {
			c.on |= 1 << f
		}
	}
	// Skip-idle is the setting of a live fleet's steady state, and the
	// checks between the steps the sharpest there are: each on in three
	// seeds of four. (Under skip-idle, lastActivity read as the time of
	// the last write, whose promise is the strictest, is drawn twice as
	// often as the other readings.)
	if r.IntN(2) == 0 {
		c.on |= 1 << featSkipIdle
	}
	if r.IntN(2) == 0 {
		c.on |= 1 << featInterlude
	}
	c.skipIdle, c.crashes = c.on.has(featSkipIdle), c.on.has(featCrash)
	if c.on.has(featShortRetention) {
		c.serviceShortMs = 1 + r.Int64N(2*3_600_000)
	}
	if c.on.has(featTooLarge) {
		c.holdRows = []int{4, 16}[r.IntN(2)]
	}
	if c.on.has(featClock) {
		c.tickMs = []int64{1, 20, 500}[r.IntN(3)]
	}
	c.moments = []int{1, 3, 8}[r.IntN(3)]
	if vars > 0 {
		c.vars = min(c.vars, vars)
	}
	if steps > 0 {
		c.steps = min(c.steps, steps)
	}
	return c
}

// simWriteWeights are how often writeBurst draws each kind of write, of
// those the seed turns on.
var simWriteWeights = []struct {
	f simFeature
	w int
}{{featNew, 3}, {featBurst, 2}, {featLate, 3}, {featAhead, 2}, {featBoundary, 3}, {featOnce, 1}, {featDelete, 1}}

// writeKind draws the kind of a write among those turned on;
// simFeatureCount (nothing) when none is.
func (c simConfig) writeKind(r *rand.Rand) simFeature {
	total := 0
	for _, k := range simWriteWeights {
		if c.on.has(k.f) {
			total += k.w
		}
	}
	if total == 0 {
		return simFeatureCount
	}
	x := r.IntN(total)
	for _, k := range simWriteWeights {
		if c.on.has(k.f) {
			if x < k.w {
				return k.f
			}
			x -= k.w
		}
	}
	return simFeatureCount
}

// runKind is the kind of run a step draws (k in [0, 10): below 6 a cycle,
// below 8 a backfill, else shards), a cycle where the seed turns the
// drawn kind off.
func (c simConfig) runKind(k int) int {
	if (k >= 6 && k < 8 && !c.on.has(featBackfill)) || (k >= 8 && !c.on.has(featShards)) {
		return 0
	}
	return k
}

// beside says what runs beside a backfill: cycles, one after the other,
// and whether the backfill reads after them.
func (c simConfig) beside(cycles int, held bool) string {
	switch {
	case c.on.has(featAlone):
		return " alone"
	case held:
		return fmt.Sprintf(" beside %d cycles, reading after them", cycles)
	case cycles > 1:
		return fmt.Sprintf(" beside %d cycles", cycles)
	}
	return " beside a cycle"
}

// promisedFrom is where the promise to a point written to v now starts:
// the lookback of v's mark in force, under the lookback configured now
// (the daemon's), math.MinInt64 without one. Caller holds w.mu.
func (w *simWorld) promisedFrom(v *simVar) int64 {
	if m, ok := w.marks[v.id]; ok && m.HwmMs > 0 {
		return m.HwmMs - w.lookback
	}
	return math.MinInt64
}

// owedUnder is a mark's debt as a reader of lookback lb takes it: lowered
// by the difference when it was reckoned under a shorter one (the
// product's windowFrom), 0 without one.
func owedUnder(m Mark, lb int64) int64 {
	if m.RereadMs == 0 {
		return 0
	}
	if m.LookbackMs > 0 && m.LookbackMs < lb {
		return m.RereadMs - (lb - m.LookbackMs)
	}
	return m.RereadMs
}

// changeLookback changes sync.lookback before step i, in one step of three
// where the seed turns featLookback on, to another of 30 min, 1 h and 2 h:
// the cycles from then on run with it, and a backfill may run with the one
// before (an operator's old configuration). Caller holds w.mu.
func (w *simWorld) changeLookback(i int) {
	if !w.cfg.on.has(featLookback) {
		return
	}
	r := rand.New(rand.NewPCG(w.seed^0x100cbac, uint64(i)))
	if r.IntN(3) != 0 {
		return
	}
	next := w.lookback
	for next == w.lookback {
		next = []int64{30 * 60_000, 3_600_000, 2 * 3_600_000}[r.IntN(3)]
	}
	w.prevLookback, w.lookback = w.lookback, next
	if next < w.prevLookback {
		// Lowering it withdraws what the longer one promised of the points
		// not read since (docs/operations.md): they are promised from the
		// new lookback of the mark they were written under.
		for _, v := range w.vars {
			for k := range v.points {
				if pt := &v.points[k]; pt.from != math.MinInt64 && pt.lb > next {
					pt.from, pt.lb = pt.from+pt.lb-next, next
				}
			}
		}
	}
	w.logf("step %d: sync.lookback %d ms, was %d ms", i, next, w.prevLookback)
}

// writeLate writes late points to v anywhere in the range the contract
// promises them: [mark in force - lookback, now], or from the service's
// floor without a mark; half of them near the mark, where a cycle that
// moves it past its lookback leaves them behind. Caller holds w.mu.
func (w *simWorld) writeLate(r *rand.Rand, v *simVar, wall int64) {
	now := w.now.Load()
	lo := w.promisedFrom(v)
	if lo == math.MinInt64 {
		lo = w.serviceFloor()
	}
	lo = min(lo, now)
	hi := now
	if r.IntN(2) == 0 {
		hi = min(now, lo+2*simLookback.Milliseconds())
	}
	n := 1 + r.IntN(3)
	for range n {
		w.write(v, lo+r.Int64N(hi-lo+1), wall)
	}
	w.logf("wrote %d late points to %s from %+d ms (%s)", n, v.id, lo-simStart, w.writingAt)
}

// writeBoundary writes to v one to three points on the places where
// off-by-one bugs live: its mark, one either side, the mark's lookback and
// one either side, an hour's first and last millisecond, the end of the
// last cycle, the service's and the sync's retention floors and one
// either side, now and one after, and when a read is served
// (reqEnd > 0), its window's ends, one beyond each, and the ends of its
// halves. Caller holds w.mu.
func (w *simWorld) writeBoundary(r *rand.Rand, v *simVar, wall, reqStart, reqEnd int64) {
	now, lb, h := w.now.Load(), simLookback.Milliseconds(), int64(simHourMs)
	var c []int64
	if m, ok := w.marks[v.id]; ok && m.HwmMs > 0 {
		mk := m.HwmMs
		c = append(c, mk-1, mk+1, mk-lb-1, mk-lb, mk-lb+1,
			simHour(mk), simHour(mk)-1, simHour(mk)+h-1, simHour(mk-lb), simHour(mk-lb)+h-1)
	}
	for _, f := range []int64{w.serviceFloor(), w.syncFloor(), w.reachable()} {
		c = append(c, f-1, f, f+1)
	}
	ago := simHour(now - r.Int64N(48)*h)
	c = append(c, simHour(now), simHour(now)-1, simHour(now)+h-1, ago, ago+h-1, now, now+1)
	if w.walkedAt != 0 {
		c = append(c, w.walkedAt-1, w.walkedAt, w.walkedAt+1)
	}
	if reqEnd > 0 && reqEnd <= now+3*h {
		mid := reqStart + (reqEnd-reqStart)/2
		c = append(c, reqStart-1, reqStart, reqEnd, reqEnd+1, mid, mid+1, mid+2)
	}
	n := 1 + r.IntN(3)
	var wrote []string
	for range n {
		ts := c[r.IntN(len(c))]
		if w.write(v, ts, wall) {
			wrote = append(wrote, fmtRel(ts))
		}
	}
	w.logf("wrote boundary points to %s at %s (%s)", v.id, strings.Join(wrote, " "), w.writingAt)
}

func fmtRel(ts int64) string { return fmt.Sprintf("%+d", ts-simStart) }

// simMomentRates are the probabilities that a write lands at each moment
// of a run the seed turns on, per call of the model.
var simMomentRates = map[simFeature]float64{
	featAtWalk: 0.5, featDuringRead: 0.2, featAfterRead: 0.3, featAtCommit: 0.3,
}

// moment is the write that may land at one moment of p's run (kind and
// content are the call's, ids the variables it concerns, [reqStart,
// reqEnd] the window a read serves, 0 0 otherwise): late or boundary
// points to one of ids, or, at a read and at a walk, any of the writes.
// Caller holds w.mu.
func (p *simProc) moment(f simFeature, kind, content string, ids []string, reqStart, reqEnd int64) {
	w := p.w
	if w.quiet || !w.cfg.on.has(f) || p.moments[f] >= w.cfg.moments {
		return
	}
	if w.cfg.on.has(featHot) {
		// One chatty device writes while the run reads whatever it reads,
		// before and after its own variable's read.
		hot := w.hot()
		if hot == nil {
			return
		}
		ids = []string{hot.id}
	}
	if !w.chance("moment/"+kind, content, simMomentRates[f]) {
		return
	}
	if p.moments == nil {
		p.moments = map[simFeature]int{}
	}
	p.moments[f]++
	r := w.rngFor("moment-write/"+kind, content)
	w.writingAt = simFeatureNames[f]
	defer func() { w.writingAt = "" }()
	var v *simVar
	if len(ids) > 0 {
		v = w.byID[ids[r.IntN(len(ids))]]
	}
	if v == nil || v.deleted || (!w.cfg.on.has(featHot) && (f == featAtWalk || f == featDuringRead) && r.IntN(3) == 0) {
		w.writeBurst(r, true)
		return
	}
	wall := w.now.Load() + 1
	late, boundary := w.cfg.on.has(featLate), w.cfg.on.has(featBoundary)
	if boundary && (!late || r.IntN(2) == 0) {
		w.writeBoundary(r, v, wall, reqStart, reqEnd)
		return
	}
	w.writeLate(r, v, wall)
}

// hot is the chatty variable of featHot: the first live one. Caller
// holds w.mu.
func (w *simWorld) hot() *simVar {
	for _, v := range w.vars {
		if !v.deleted {
			return v
		}
	}
	return nil
}

// tick moves the clock as a request of a run is made, by up to twice the
// seed's tick: the service's retention floor moves with it, and points
// written meanwhile are stamped after the end of the cycle that reads.
// Caller holds w.mu.
func (w *simWorld) tick(content string) {
	if w.quiet || w.cfg.tickMs == 0 {
		return
	}
	w.now.Add(int64(w.draw("clock", content) % uint64(2*w.cfg.tickMs+1)))
}

// backfillBounds are a backfill's from and to: as drawn, or, for half the
// backfills of the seeds with boundaries or late points on, from a
// boundary of a variable's mark (its lookback, one either side, the mark)
// to now, where a backfill joins the mark's lookback or just fails to.
// Just before it, the variable reports a new point, and a late one lands
// between the mark's lookback and the backfill's start.
func (w *simWorld) backfillBounds(r *rand.Rand, from, to int64) (int64, int64) {
	if !(w.cfg.on.has(featBoundary) || w.cfg.on.has(featLate)) || r.IntN(2) == 0 {
		return from, to
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var marked []*simVar
	for _, v := range w.live() {
		if m, ok := w.marks[v.id]; ok && m.HwmMs > 0 {
			marked = append(marked, v)
		}
	}
	if len(marked) == 0 {
		return from, to
	}
	v, lb := marked[r.IntN(len(marked))], simLookback.Milliseconds()
	m := w.marks[v.id]
	from = []int64{m.HwmMs - lb - 1, m.HwmMs - lb, m.HwmMs - lb + 1, m.HwmMs - lb/2, m.HwmMs}[r.IntN(5)]
	now := w.now.Load()
	w.write(v, now-r.Int64N(60_000), now)
	if lo := m.HwmMs - lb; from > lo {
		ts := lo + r.Int64N(from-lo)
		w.write(v, ts, now)
		w.logf("wrote a late point to %s at %s ms, inside its mark's lookback, before the backfill's start", v.id, fmtRel(ts))
	}
	return from, w.now.Load()
}

// simRead is a cycle's read of a variable as its mark stands for it: the
// world's write counter when its run began and when the mark landed.
// The points written in between may be owed (Mark.RereadMs); those
// written before were read, but for a read of the new points alone
// (Target.Tail) those stamped at or below above, the mark in force when
// it landed, which were owed to the next re-read.
type simRead struct {
	start, end int64
	above      int64
	// run is the number of the run that read (simProc.run).
	run int64
	// endMs is the end of the read's window (Mark.CheckedMs).
	endMs int64
	// reach is the earliest timestamp a read could reach when its run
	// began (simWorld.reachable): below it nothing is promised any more;
	// from is the target's From (where the range it handed the analyst
	// tables starts), math.MinInt64 when the simulation did not see it.
	reach, from int64
}

// simPlans is the link in front of the marks that notes, for the store's
// checks, which of the targets done read the points after their mark
// alone, and the mark each was planned with (simProc.tails).
func simPlans(p *simProc) Link {
	return Link{Stage: "sim", Wrap: func(next Committer) Committer {
		return CommitFunc(func(ctx context.Context, done []Done, final bool) error {
			p.w.mu.Lock()
			if p.tails == nil {
				p.tails, p.froms = map[string]Mark{}, map[string]int64{}
			}
			for _, d := range done {
				p.froms[d.Variable.ID] = d.From
				if d.Tail {
					p.tails[d.Variable.ID] = d.Mark
				} else {
					delete(p.tails, d.Variable.ID)
				}
			}
			p.w.mu.Unlock()
			return next.Commit(ctx, done, final)
		})
	}}
}

// noteRead records, as a commit of marks lands, which read the variable's
// mark now stands for, when it was a cycle's (a backfill's mark keeps the
// last cycle's read position), and which runs' writes the mark may still
// owe: a cycle's commit owes those of its own run; a backfill's adds its
// run to the debt it keeps (it owes, from the lookback of the mark in
// force, what was written while it ran, or from its start without a
// mark); a read of the new points alone owes all that the mark it
// replaced owed, whenever written, and what its own run wrote; below is
// the HwmMs of the mark it was planned with. Caller holds w.mu.
func (w *simWorld) noteRead(p *simProc, m Mark) {
	if w.reads == nil {
		w.reads, w.rereads, w.owes, w.rereadLog = map[string]simRead{}, map[string]simRead{}, map[string][]simRead{}, map[string][]simRead{}
	}
	run := simRead{start: p.startSeq, end: w.seq, above: math.MinInt64, endMs: m.CheckedMs, run: p.run, reach: p.startReach, from: math.MinInt64}
	if from, ok := p.froms[m.VariableID]; ok {
		run.from = from
	}
	switch {
	case strings.HasPrefix(p.name, "backfill"):
		w.owes[m.VariableID] = append(w.owes[m.VariableID], run)
		return
	case p.tails[m.VariableID].VariableID != "":
		run.above = p.tails[m.VariableID].HwmMs
		w.reads[m.VariableID] = run
		w.owes[m.VariableID] = []simRead{{start: math.MinInt64, end: w.seq}}
		return
	}
	w.reads[m.VariableID] = run
	w.rereads[m.VariableID] = run
	w.rereadLog[m.VariableID] = append(w.rereadLog[m.VariableID], run)
	w.owes[m.VariableID] = []simRead{run}
}

// String says where p is and when it was written, relative to the start.
func (p simPoint) String() string {
	from := "none"
	if p.from != math.MinInt64 {
		from = fmtRel(p.from+p.lb) + " ms"
	}
	at := p.at
	if at == "" {
		at = "between runs"
	}
	return fmt.Sprintf("at %s ms, written at t=%s ms %s, the mark in force then at %s", fmtRel(p.ts), fmtRel(p.wall), at, from)
}

// promised says whether the contract holds the sync to the point p by now:
// stamped at or after the lookback of the mark in force when it was
// written, inside retention ([lo, now]).
func (p simPoint) promised(lo, now int64) bool {
	return p.ts >= lo && p.ts <= now && p.ts >= p.from
}

// interlude runs again the backfills of step i that failed, then, for
// the seeds that turn it on, a quiet cycle (no faults, no writes, the
// clock standing still while it reads) and the check of the
// first quiet cycle (checkNext): what must land at once lands between the
// steps too, before the writes of later steps hide a loss (a write that
// moves lastActivity, say).
func (w *simWorld) interlude(i int) {
	w.backfillAgain(i)
	if !w.cfg.on.has(featInterlude) || i == w.cfg.steps-1 {
		return
	}
	// Some time passes first: points stamped ahead fall due, and the
	// retention floor moves past points a stopped run left behind.
	w.mu.Lock()
	w.quiet = true
	w.now.Add([]int64{0, 1_000, 60_000, 3_600_000}[w.draw("interlude", fmt.Sprint(i))%4])
	w.logf("step %d: a quiet cycle", i)
	w.mu.Unlock()
	before := w.marksNow()
	w.run(w.proc(fmt.Sprintf("quiet%d", i), false), func(s *Syncer, ctx context.Context) error {
		sum, err := s.Cycle(ctx)
		if err == nil && len(sum.Failed) > 0 {
			err = sum.Failed[0]
		}
		return err
	})
	w.checkNext(fmt.Sprintf("after the quiet cycle after step %d", i), before)
	w.mu.Lock()
	if !w.cfg.skipIdle {
		// Under skip-idle, a variable none of the step's writes reached
		// may wait for its recheck, and with it the hours a failed run
		// stored rows in without recomputing them (checked at the end,
		// once idle_recheck has passed).
		w.checkTables(fmt.Sprintf("after the quiet cycle after step %d", i))
	}
	w.quiet = false
	w.mu.Unlock()
}

// noteBackfill notes a backfill over [from, to] that failed (err, or a
// variable it could not move): the operator runs it again, as
// docs/reliability.md says to, since no cycle re-reads what it loaded
// below the marks' lookback, nor hands it to the rollups.
func (w *simWorld) noteBackfill(from, to int64, sum Summary, err error) {
	if err == nil && len(sum.Failed) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unfinished = append(w.unfinished, [2]int64{from, to})
}

// backfillAgain runs again the backfills of step i that failed, quietly
// (an operator's rerun once the fault is gone), up to three times.
func (w *simWorld) backfillAgain(i int) {
	w.mu.Lock()
	again := w.unfinished
	w.unfinished = nil
	w.quiet = true
	w.mu.Unlock()
	for k, b := range again {
		w.mu.Lock()
		w.logf("step %d: the failed backfill %d..%d again", i, b[0]-simStart, b[1]-simStart)
		w.mu.Unlock()
		for try := 0; try < 3; try++ {
			var failed bool
			w.run(w.proc(fmt.Sprintf("backfill%d-again%d-%d", i, k, try), false), func(s *Syncer, ctx context.Context) error {
				sum, err := s.Backfill(ctx, b[0], b[1], nil)
				failed = err != nil || len(sum.Failed) > 0
				return err
			})
			if !failed {
				break
			}
		}
	}
	w.mu.Lock()
	w.quiet = false
	w.mu.Unlock()
}

// checkNext checks a quiet cycle that follows a step. Where every write
// moves lastActivity, or nothing is skipped as idle, every promised point
// must have landed; under the other readings of lastActivity, every
// promised point that existed when its variable's last complete read
// began (that read saw it, or saw it ahead and noted when it falls due).
//
// Between re-reads a cycle reads the points after each mark alone, so a
// late point (stamped at or below the mark in force when the cycle began)
// written since its variable's last re-read began may wait for the next
// one, but no longer than idle_recheck: a variable whose last re-read (as
// the simulation saw it land, not as its mark says) is that old when the
// quiet cycle begins is re-read by it, and every promised point lands.
// before is the state before the quiet cycle.
func (w *simWorld) checkNext(when string, before simBefore) {
	all := !w.cfg.skipIdle || w.cfg.la == laWriteTime || w.cfg.la == laNone
	w.mu.Lock()
	reads, rereads, now := w.reads, w.rereads, w.now.Load()
	w.mu.Unlock()
	w.checkLanded(when, func(v *simVar, p simPoint) bool {
		if rr, ok := before.rereads[v.id]; !ok || now-rr.endMs >= simRecheck.Milliseconds() {
			return true
		}
		if rr, ok := rereads[v.id]; ok && p.seq <= rr.start {
			return true
		}
		if all {
			m, ok := before.marks[v.id]
			return !ok || p.ts > m.HwmMs
		}
		r, ok := reads[v.id]
		return ok && p.seq <= r.start && p.ts > r.above
	})
}

// simBefore is the state before a quiet cycle that checkNext needs: the
// marks, and each variable's last re-read.
type simBefore struct {
	marks   map[string]Mark
	rereads map[string]simRead
}

// marksNow is the state checkNext needs as it stands.
func (w *simWorld) marksNow() simBefore {
	w.mu.Lock()
	defer w.mu.Unlock()
	return simBefore{marks: maps.Clone(w.marks), rereads: maps.Clone(w.rereads)}
}

// checkLanded compares the warehouse with the source: every promised
// point (see simPoint.promised) of a live variable that want accepts (nil:
// all) is stored; the stores checked the values, and that nothing else
// is.
func (w *simWorld) checkLanded(when string, want func(*simVar, simPoint) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lo, now := w.reachable(), w.now.Load()
	for _, v := range w.vars {
		if v.deleted {
			continue
		}
		var missing []simPoint
		for _, p := range v.points {
			if !p.promised(lo, now) || (want != nil && !want(v, p)) {
				continue
			}
			if _, ok := w.stored[v.id][p.ts]; !ok {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			w.violate("%s, %s lacks %d of its promised points (first %s; mark now %+v)", when, v.id, len(missing), missing[0], w.marks[v.id])
		}
	}
}

// liveIDs are the ids of vars.
func liveIDs(vars []*simVar) []string {
	ids := make([]string, len(vars))
	for i, v := range vars {
		ids[i] = v.id
	}
	return ids
}

// touchedIDs are the variables of a call of the Rollup hook.
func touchedIDs(touched []analyst.Range) []string {
	ids := make([]string, len(touched))
	for i, t := range touched {
		ids[i] = t.VariableID
	}
	return ids
}

// owedFrom is where a mark still owes points to the next read
// (Mark.RereadMs: points written while the read that committed it ran,
// from the lookback of the mark in force then), 0 when it owes none.
func owedFrom(m Mark) int64 { return m.RereadMs }

// owedBy says which points p's commit of m may leave unread below the
// mark: for a backfill (which reads a closed range from its start and
// keeps the debt of the mark in force), the points that mark owes, written
// while one of the runs it stands for ran (the last cycle's read and the
// backfills that moved the mark since; any time before a read of the new
// points alone), from owedFrom on; for a cycle's read of the new points
// alone, those stamped from where the next re-read starts (windowFrom) up
// to the mark in force, which it did not read; none for a re-read, which
// started no later than what its mark owed. A point written between
// those runs is promised from the lookback of the mark in force then, and
// a backfill that moves the mark must have read it. Caller holds w.mu.
func (w *simWorld) owedBy(p *simProc, m Mark) func(simPoint) bool {
	// The next re-read runs with the lookback configured then: the
	// greater of the run's and today's, the wider excuse.
	lb := max(p.lookback, w.lookback)
	from, runs := owedUnder(m, lb), w.owes[m.VariableID]
	if planned, ok := p.tails[m.VariableID]; ok && !strings.HasPrefix(p.name, "backfill") {
		from, below := m.HwmMs-lb, planned.HwmMs
		if m.RereadMs != 0 {
			from = min(from, owedUnder(m, lb))
		}
		return func(pt simPoint) bool { return pt.ts >= from && pt.ts <= below }
	}
	if from == 0 || !strings.HasPrefix(p.name, "backfill") {
		return func(simPoint) bool { return false }
	}
	return func(pt simPoint) bool {
		if pt.ts < from {
			return false
		}
		// A backfill of a shorter lookback than the one that promised the
		// point joins up under its own (BackfillMark) and may leave the
		// point below it unread: the debt it commits is reckoned under its
		// lookback, and a re-read of the longer one lowers it by the
		// difference (owedUnder), down to the point.
		if p.lookback < pt.lb && pt.ts < pt.from+pt.lb-p.lookback {
			return true
		}
		for _, r := range runs {
			if pt.seq > r.start && pt.seq <= r.end {
				return true
			}
		}
		return false
	}
}

// noteStored records rows as stored by p's run. Caller holds w.mu.
func (p *simProc) noteStored(rows []Row) {
	if p.stored == nil {
		p.stored, p.unrolled = map[string][]int64{}, map[string]map[int64]int64{}
	}
	p.w.stores++
	for _, r := range rows {
		p.stored[r.VariableID] = append(p.stored[r.VariableID], r.TsMs)
		if p.unrolled[r.VariableID] == nil {
			p.unrolled[r.VariableID] = map[int64]int64{}
		}
		p.unrolled[r.VariableID][r.TsMs] = p.w.stores
	}
}

// checkRolled holds p's commit of m to the committer's rule: a mark is
// written only once the rollups of the rows below it are recomputed, so
// every row p's run stored for the variable at or below the mark is in
// its hourly row (a crash between the load and the recompute then leaves
// the mark behind, and the next read hands the rows to the hook again).
// Caller holds w.mu.
func (w *simWorld) checkRolled(p *simProc, m Mark) {
	for _, ts := range p.stored[m.VariableID] {
		if ts > m.HwmMs {
			continue
		}
		if _, ok := w.tables.hourly[m.VariableID][simHour(ts)][ts]; !ok {
			w.violate("%s committed %s's mark at %s ms before the rollup of the row it stored at %s ms", p.name, m.VariableID, fmtRel(m.HwmMs), fmtRel(ts))
			return
		}
	}
}
