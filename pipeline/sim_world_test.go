package pipeline_test

// The models the deterministic simulation (sim_test.go) drives the real
// Syncer with: the service (simSource), the warehouse (simInsert) and the
// state store (simStore), all over one simWorld. Every choice the spec
// leaves open, and every fault, is drawn where it is made from the seed and
// the content of the call (draw), never from the order in which goroutines
// arrive, so a seed replays the same choices.

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/fleetsync/fleetsync/pipeline"
)

// simPoint is one point of the model service.
type simPoint struct {
	ts    int64
	value float64
	// seq is the world's write counter when the point was written, wall
	// the simulated time then.
	seq, wall int64
	// from is where the contract's promise to the point starts: the
	// lookback of the mark in force when it was written (math.MinInt64
	// when none was, the retention floor then bounding it). A point
	// stamped before it may be lost; one at or after it must land. at is
	// the moment it was written (between runs, or which hook of a run).
	from int64
	at   string
	// lb is the lookback from was reckoned under: lowering sync.lookback
	// narrows the promise to the new one (changeLookback).
	lb int64
}

type simVar struct {
	id, device string
	points     []simPoint // ascending ts, one point a millisecond
	deleted    bool
	// firstWall and lastWall are the simulated times of its first and last
	// write; walked is lastActivity as the previous walk reported it.
	firstWall, lastWall int64
	walked              int64
}

// simCut is which points a frame cut by the limit keeps.
type simCut int

const (
	cutNewest simCut = iota
	cutOldest
	cutAny
	cutMixed    // newest or oldest, chosen per frame
	cutPerFrame // any of the above, chosen per frame
)

// simOrder is the order a frame's rows are served in.
type simOrder int

const (
	orderNewestFirst simOrder = iota
	orderOldestFirst
	orderShuffled
	orderPerFrame
)

// laReading is what lastActivity means to the model service.
type laReading int

const (
	laNewestTs  laReading = iota // the newest point's timestamp
	laWriteTime                  // the time of the last write (moved by late points)
	laNone                       // never reported
	laFrozen                     // set by the first write, never moved again
	laStale                      // what the previous walk said
)

// countMode is how the model service answers counts.
type countMode int

const (
	countsExact       countMode = iota
	countsFlaky                 // exact, or a retryable failure, or -1 for some variables
	countsNone                  // the source cannot count at all
	countsRefused               // every count fails permanently (a 4xx)
	countsUnavailable           // -1 for every variable
)

// simConfig is one seed's scenario: the fleet's size, the engine's
// options and which reading of the spec the service has.
type simConfig struct {
	vars, steps                     int
	rows, perReq, inFlight, workers int
	batchRows                       int
	cut                             simCut
	order                           simOrder
	la                              laReading
	counts                          countMode
	skipIdle                        bool
	faults                          float64 // scales every fault's probability
	crashes                         bool
	// serviceShortMs is how much shorter the service's retention is than
	// the configured one (0: the same).
	serviceShortMs int64
	// moveChunk is SyncOptions.MoveChunk: a cycle moves its variables
	// this many at a time (0: all at once, the default chunk being larger
	// than any seed's fleet).
	moveChunk int
	// holdRows is how many rows the source's decoder holds of a response
	// that serves its results before its columns (fleetapi's
	// MaxHeldResults): a response of more rows, served so (half of them,
	// at random), fails as too large before any point reaches the sink,
	// and the reader asks for less (reader.shrink). 0: never.
	holdRows int
	// on is the features the seed turns on (sim_swarm_test.go).
	on simFeatures
	// tickMs is how far the clock moves with each request of a run, on
	// average (0: it stands still while a run reads).
	tickMs int64
	// moments is how many writes a run meets at most at each kind of moment.
	moments int
}

func (c simCut) String() string {
	return [...]string{"newest", "oldest", "any", "mixed", "per-frame"}[c]
}

func (o simOrder) String() string {
	return [...]string{"newest-first", "oldest-first", "shuffled", "per-frame"}[o]
}

func (l laReading) String() string {
	return [...]string{"newest-ts", "write-time", "none", "frozen", "stale"}[l]
}

func (m countMode) String() string {
	return [...]string{"exact", "flaky", "none", "refused", "unavailable"}[m]
}

func (c simConfig) String() string {
	return fmt.Sprintf("vars=%d steps=%d rows_per_request=%d vars_per_request=%d in_flight=%d insert_workers=%d batch_rows=%d cut=%s order=%s last_activity=%s counts=%s faults=%.2f service_short=%dms move_chunk=%d hold_rows=%d tick=%dms on=%s",
		c.vars, c.steps, c.rows, c.perReq, c.inFlight, c.workers, c.batchRows, c.cut, c.order, c.la, c.counts, c.faults, c.serviceShortMs, c.moveChunk, c.holdRows, c.tickMs, c.on)
}

// The simulated sync's fixed settings.
const (
	simRetention = 10 * 24 * time.Hour
	simMargin    = time.Minute
	simLookback  = time.Hour
	simRecheck   = 6 * time.Hour
	simStart     = int64(1_750_000_000_000)
)

// simWorld is the service, the warehouse and the state store of one seed.
type simWorld struct {
	seed uint64
	cfg  simConfig
	now  atomic.Int64

	mu     sync.Mutex
	vars   []*simVar
	byID   map[string]*simVar
	seq    int64
	seen   map[string]int
	quiet  bool // no faults, no writes during runs, no shifting pages
	stored map[string]map[int64]float64
	// meta is the warehouse's metadata tables (sim_meta_test.go).
	meta  *simMeta
	marks map[string]Mark
	// watermarks are the settled watermarks published (sim_watermark_test.go).
	watermarks []simWatermark
	tables     simTables // the analyst tables (sim_rollup_test.go)
	// violations are broken invariants found as they happen.
	violations []string
	trace      []string
	nextVar    int
	// sched lets the seed's goroutines go on one at a time (sim_sched_test.go).
	sched *simSched
	// writingAt names the moment of a run a write lands at ("" between
	// runs); walkedAt is the clock when the last walk began, about the
	// end of its cycle's windows.
	writingAt string
	walkedAt  int64
	// reads is, per variable, the read its mark stands for, and rereads
	// its last re-read of the lookback (sim_swarm_test.go's noteRead).
	reads, rereads map[string]simRead
	// rereadLog is, per variable, every re-read of the lookback in the
	// order their marks landed.
	rereadLog map[string][]simRead
	// owes is, per variable, the runs whose writes its mark may still
	// owe (see noteRead).
	owes map[string][]simRead
	// orphans and stores: see sim_rollup_test.go's orphans; runs counts
	// the runs begun (simProc.run).
	orphans map[string]map[int64]int64
	runs    int64
	stores  int64
	// unfinished are the ranges of the backfills that failed in the
	// last step, which the operator runs again (sim_swarm_test.go).
	unfinished [][2]int64
	// lookback is sync.lookback as configured now (ms), prevLookback the
	// one before it (changeLookback).
	lookback, prevLookback int64
}

// draw is the model's random choice of kind for content: a function of the
// seed, the content and how often the same content was drawn before, so
// goroutines that race each other still get the same choices for the same
// calls. Caller holds w.mu.
func (w *simWorld) draw(kind, content string) uint64 {
	key := kind + "\x00" + content
	n := w.seen[key]
	w.seen[key] = n + 1
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], w.seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	h.Write(b[:])
	h.Write([]byte(key))
	return mix64(h.Sum64())
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// chance is true with probability p for this draw. Caller holds w.mu.
func (w *simWorld) chance(kind, content string, p float64) bool {
	return float64(w.draw(kind, content)>>11)/float64(1<<53) < p
}

// fault is chance scaled by the seed's fault level, and never when quiet.
func (w *simWorld) fault(kind, content string, p float64) bool {
	return !w.quiet && w.cfg.faultOn(kind) && w.chance(kind, content, p*w.cfg.faults)
}

func (w *simWorld) rngFor(kind, content string) *rand.Rand {
	x := w.draw(kind, content)
	return rand.New(rand.NewPCG(x, mix64(x)))
}

func (w *simWorld) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("[t=%d] ", w.now.Load()-simStart)+fmt.Sprintf(format, args...))
}

func (w *simWorld) violate(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

// serviceFloor is the earliest timestamp the service serves. Caller holds w.mu.
func (w *simWorld) serviceFloor() int64 {
	return w.now.Load() - simRetention.Milliseconds() + w.cfg.serviceShortMs
}

// syncFloor is the floor the Syncer computes.
func (w *simWorld) syncFloor() int64 {
	return w.now.Load() - simRetention.Milliseconds() + simMargin.Milliseconds()
}

// reachable is the earliest timestamp a sync is held to: its floor, or
// the service's when that is later (the engine moves there, plus its
// margin and the search's resolution).
func (w *simWorld) reachable() int64 {
	return max(w.syncFloor(), w.serviceFloor()+simMargin.Milliseconds()+FloorResolution)
}

// addVar creates a variable of device dev. Caller holds w.mu.
func (w *simWorld) addVar(dev string) *simVar {
	v := &simVar{id: fmt.Sprintf("v%03d", w.nextVar), device: dev}
	w.nextVar++
	w.vars = append(w.vars, v)
	w.byID[v.id] = v
	return v
}

// write adds a point to v unless its millisecond holds one. wall is the
// simulated time of the write. Caller holds w.mu.
func (w *simWorld) write(v *simVar, ts int64, wall int64) bool {
	if v.deleted {
		return false
	}
	i, found := slices.BinarySearchFunc(v.points, ts, func(p simPoint, t int64) int { return cmpInt(p.ts, t) })
	if found {
		return false
	}
	w.seq++
	v.points = slices.Insert(v.points, i, simPoint{ts: ts, value: float64(w.seq%9973) + 0.25, seq: w.seq, wall: wall,
		from: w.promisedFrom(v), at: w.writingAt, lb: w.lookback})
	if v.firstWall == 0 {
		v.firstWall = wall
	}
	v.lastWall = wall
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// lastActivity is v's lastActivity under the seed's reading. Caller holds w.mu.
func (w *simWorld) lastActivity(v *simVar) int64 {
	switch w.cfg.la {
	case laNewestTs:
		if len(v.points) == 0 {
			return 0
		}
		return v.points[len(v.points)-1].ts
	case laWriteTime:
		return v.lastWall
	case laFrozen:
		return v.firstWall
	case laStale:
		la := v.walked
		v.walked = v.lastWall
		return la
	}
	return 0
}

// writeBurst writes one of the kinds of points the sync must handle that
// the seed turns on (sim_swarm_test.go): new ones, dense bursts, late ones
// over the whole range the contract promises, ones stamped ahead of the
// clock, ones on the boundaries where off-by-one bugs live, a variable
// that reports once, deletions. r draws them; during says the write
// happens while a run reads (stamps of new points then start at the run's
// clock). Caller holds w.mu.
func (w *simWorld) writeBurst(r *rand.Rand, during bool) {
	now := w.now.Load()
	wall := now
	if during {
		wall = now + 1
	}
	live := w.live()
	pick := func() *simVar {
		if len(live) == 0 {
			return nil
		}
		return live[r.IntN(len(live))]
	}
	switch w.cfg.writeKind(r) {
	case featNew: // new points, just before now (or just after, while a run reads)
		if v := pick(); v != nil {
			base := now - 5*60_000
			if during {
				base = now + 1
			}
			for range 1 + r.IntN(8) {
				w.write(v, base+r.Int64N(5*60_000), wall)
			}
			w.logf("wrote new points to %s", v.id)
		}
	case featBurst: // a dense burst: frames cut by the limit
		if v := pick(); v != nil {
			base := now - 10*60_000
			n := 20 + r.IntN(200)
			for range n {
				w.write(v, base+r.Int64N(10*60_000), wall)
			}
			w.logf("wrote a burst of %d to %s", n, v.id)
		}
	case featLate: // late points anywhere the contract promises them
		if v := pick(); v != nil {
			w.writeLate(r, v, wall)
		}
	case featAhead: // stamped ahead of the clock
		if v := pick(); v != nil {
			w.write(v, now+1+r.Int64N([]int64{60_000, 3_600_000, 3 * 3_600_000}[r.IntN(3)]), wall)
			w.logf("wrote a point ahead to %s", v.id)
		}
	case featBoundary: // on the boundaries of marks, hours and the floor
		if v := pick(); v != nil {
			w.writeBoundary(r, v, wall, 0, 0)
		}
	case featOnce: // a new variable that reports once
		dev := fmt.Sprintf("d%d", r.IntN(3))
		v := w.addVar(dev)
		w.write(v, now-r.Int64N(5*24*3_600_000), wall)
		w.logf("new variable %s of %s reported once", v.id, dev)
	case featDelete: // a deletion: a variable, rarely a device
		if v := pick(); v != nil && r.IntN(4) > 0 {
			v.deleted = true
			w.logf("deleted variable %s", v.id)
		} else if v != nil {
			for _, o := range w.vars {
				if o.device == v.device {
					o.deleted = true
				}
			}
			w.logf("deleted device %s", v.device)
		}
	}
}

// live are the variables not deleted. Caller holds w.mu.
func (w *simWorld) live() []*simVar {
	var out []*simVar
	for _, v := range w.vars {
		if !v.deleted {
			out = append(out, v)
		}
	}
	return out
}

// simProc is one fleetsync process: it stops (crashes) at a point drawn
// from the seed, after which nothing it does becomes durable.
type simProc struct {
	w         *simWorld
	name      string
	crashable bool
	// held, when not nil, holds the run's raw-series requests until it is
	// closed: a run planned with the marks of its start that reads after
	// the runs beside it have committed theirs (oneAfterAnother).
	held  chan struct{}
	heldN int // requests held so far, guarded by w.mu
	// lookback is the sync.lookback the run was started with (ms); 0
	// takes the one configured when it starts.
	lookback int64
	dead     bool // guarded by w.mu
	cancel   context.CancelFunc
	// startSeq is the world's write counter when its run began: points
	// written after it need not be loaded by the run's marks.
	startSeq int64
	// run numbers the runs in the order they began (simWorld.runs), and
	// startReach is the world's reachable() then.
	run        int64
	startReach int64
	// tails are the variables whose last target done in the run read
	// the points after its mark alone (Target.Tail), with the mark it
	// was planned with (simPlans). Guarded by w.mu.
	tails map[string]Mark
	// froms is the From of each variable's last target done in the run
	// (simPlans). Guarded by w.mu.
	froms map[string]int64
	// startPubs is how many watermarks were published when its run began,
	// and startHolders the variables holding points then; walked are the
	// variables its walks listed (a page that shifted drops one).
	startPubs    int
	startHolders map[string]bool
	walked       map[string]bool
	// asked counts the raw-series requests of the run by content, and
	// requests all of them: a run that asks the same request again and
	// again, or far more than its data needs, never ends (liveness).
	asked    map[string]int
	requests int
	stuck    bool
	// moments counts the writes that landed at each kind of moment of
	// the run (see simProc.moment): a run meets at most simConfig.moments
	// of each, as a fleet writes a few points while a cycle reads, not
	// one a request.
	moments map[simFeature]int
	// stored is, per variable, the timestamps of the rows the run stored.
	stored map[string][]int64
	// unrolled is, per variable, the rows the run stored that none of
	// its own hourly recomputes has covered since: timestamp → the
	// world's store counter when stored (see sim_rollup_test.go's orphans).
	unrolled map[string]map[int64]int64
	// halted says the run was killed (or flagged as never ending), and
	// recomputeFailed that one of its recomputes failed: only then may it
	// end with rows none of them covered. A SIGTERM is not enough: the run
	// finishes what it fetched and hands every target on, done or not.
	halted, recomputeFailed bool
}

// Liveness bounds of one run: the same raw-series request more than
// simMaxRepeats times, or more than simMaxRequests requests, is a loop.
const (
	simMaxRepeats  = 32
	simMaxRequests = 50_000
)

// ask notes one raw-series request; past the liveness bounds the run is
// flagged and stopped. Caller holds w.mu.
func (p *simProc) ask(content string) {
	if p.asked == nil {
		p.asked = map[string]int{}
	}
	p.asked[content]++
	p.requests++
	if p.stuck || (p.asked[content] <= simMaxRepeats && p.requests <= simMaxRequests) {
		return
	}
	p.stuck, p.halted = true, true
	p.w.violate("%s does not end: %d raw-series requests, %d of them %s", p.name, p.requests, p.asked[content], content)
	p.cancel()
}

// step is a point where the process may crash. Caller holds w.mu.
// write is the opening of a model call that writes (a commit of marks, a
// rollup): its step, at which the process may stop, and the error a
// stopped process's call gets, nil while it runs. Caller holds w.mu.
func (p *simProc) write(kind, content, what string) error {
	p.step(kind, content)
	if p.dead {
		return &simError{msg: what + ": connection reset (process stopped)", retryable: true}
	}
	return nil
}

func (p *simProc) step(kind, content string) {
	if !p.crashable || p.dead || !p.w.chance("crash/"+kind, p.name+content, 0.04) {
		return
	}
	// Half the stops are kills (nothing after them is durable), half a
	// SIGTERM (the run is cancelled and finishes what it fetched).
	if p.w.chance("crash-kill/"+kind, p.name+content, 0.5) {
		p.dead, p.halted = true, true
		p.w.logf("%s killed at %s %s", p.name, kind, content)
	} else {
		p.w.logf("%s stopped (SIGTERM) at %s %s", p.name, kind, content)
	}
	p.crashable = false
	p.cancel()
}

// simError is the model service's and warehouse's error.
type simError struct {
	msg       string
	retryable bool
	scoped    bool
	notFound  bool
	retention bool
	tooLarge  bool
	index     int
}

func (e *simError) Error() string           { return e.msg }
func (e *simError) Retryable() bool         { return e.retryable }
func (e *simError) VariableScoped() bool    { return e.scoped }
func (e *simError) NotFound() bool          { return e.notFound }
func (e *simError) RetentionExceeded() bool { return e.retention }
func (e *simError) TooLarge() bool          { return e.tooLarge }

// simVarError is a frame the decoder could not read.
type simVarError struct{ simError }

func (e *simVarError) VariableIndex() int { return e.index }

// simSource is the model service as one process sees it.
type simSource struct{ p *simProc }

// simCountingSource is a simSource that counts (CountSource).
type simCountingSource struct{ simSource }

func (s simSource) Walk(ctx context.Context, _ Scope, sink WalkSink) error {
	w := s.p.w
	w.sched.call("walk")
	w.mu.Lock()
	content := fmt.Sprint(w.now.Load())
	s.p.step("walk", content)
	if err := ctx.Err(); err != nil {
		w.mu.Unlock()
		return err
	}
	w.walkedAt = w.now.Load()
	s.p.moment(featAtWalk, "walk", s.p.name+content, liveIDs(w.live()), 0, 0)
	if w.fault("walk", s.p.name+content, 0.05) {
		w.mu.Unlock()
		return &simError{msg: "walk: 503 Service Unavailable", retryable: true}
	}
	var vars []Variable
	devs := map[string]bool{}
	for _, v := range w.vars {
		if v.deleted {
			continue
		}
		// Pages that shift while they are walked drop an object or list
		// it twice.
		if w.fault("walk/drop", s.p.name+content+v.id, 0.05) {
			continue
		}
		// Its lastActivity is read with its page (below).
		sv := Variable{ID: v.id, Label: "l" + v.id, DeviceID: v.device, DeviceLabel: "dev-" + v.device}
		vars = append(vars, sv)
		if s.p.walked == nil {
			s.p.walked = map[string]bool{}
		}
		s.p.walked[v.id] = true
		if w.fault("walk/twice", s.p.name+content+v.id, 0.05) {
			vars = append(vars, sv)
		}
		devs[v.device] = true
	}
	var devices []Device
	for d := range devs {
		devices = append(devices, Device{ID: d, Label: "dev-" + d})
	}
	sort.Slice(devices, func(i, j int) bool { return devices[i].ID < devices[j].ID })
	// The walk hands its pages on as it reads them, the world unlocked in
	// between so that the cycle moves the pages already walked (writes
	// land meanwhile); a listing that starts over hands a prefix again,
	// and a page that fails ends the walk part way.
	rng := w.rngFor("walk/pages", s.p.name+content)
	pageSize := 1 + rng.IntN(4)
	restartAt := -1
	if w.fault("walk/restart", s.p.name+content, 0.1) && len(vars) > 0 {
		restartAt = rng.IntN(len(vars))
	}
	failAt := -1
	if w.fault("walk/page", s.p.name+content, 0.05) && len(vars) > 0 {
		failAt = rng.IntN(len(vars))
	}
	w.mu.Unlock()
	if err := sink.Devices(ctx, devices); err != nil {
		return err
	}
	for i := 0; i < len(vars); i += pageSize {
		if failAt >= 0 && i >= failAt {
			return &simError{msg: "walk: a page answered 503 Service Unavailable", retryable: true}
		}
		page := slices.Clone(vars[i:min(i+pageSize, len(vars))])
		// A page is read when the walk reaches it, after the cycle moved
		// the pages before it: lastActivity as it stands then.
		w.mu.Lock()
		for j := range page {
			page[j].LastActivityMs = w.lastActivity(w.byID[page[j].ID])
		}
		w.mu.Unlock()
		if err := sink.Variables(ctx, page); err != nil {
			return err
		}
		if restartAt >= 0 && i >= restartAt {
			restartAt, i = -1, -pageSize
		}
	}
	return nil
}

// during is the writes that land as a read or a count of the variables
// ids over [start, end] is served: drawn per call. Caller holds w.mu.
func (s simSource) during(kind, content string, ids []string, start, end int64) {
	s.p.moment(featDuringRead, kind, content, ids, start, end)
}

func (s simSource) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	w := s.p.w
	if s.p.held != nil {
		w.mu.Lock()
		s.p.heldN++
		who := fmt.Sprintf("%s/held%d", s.p.name, s.p.heldN)
		w.mu.Unlock()
		select {
		case <-s.p.held:
		case <-ctx.Done():
		}
		// Woken by another goroutine: a turn of its own before it
		// touches anything shared (sim_sched_test.go).
		w.sched.park(who, "")
	}
	content := fmt.Sprint(req.VariableIDs, req.Start, req.End, req.Limit)
	w.sched.call("series " + content)
	w.mu.Lock()
	s.p.ask(content)
	s.p.step("series", content)
	w.tick(content)
	s.during("series", content, req.VariableIDs, req.Start, req.End)
	if err := ctx.Err(); err != nil {
		w.mu.Unlock()
		return err
	}
	if req.Start < w.serviceFloor() {
		w.mu.Unlock()
		return &simError{msg: "403003 past retention", retention: true}
	}
	for _, id := range req.VariableIDs {
		if v := w.byID[id]; v == nil || v.deleted {
			w.mu.Unlock()
			return &simError{msg: "404 variable " + id, notFound: true, scoped: true}
		}
	}
	if w.fault("series/429", content, 0.04) {
		w.mu.Unlock()
		return &simError{msg: "429 Too Many Requests (retries spent)", retryable: true}
	}
	if len(req.VariableIDs) > 1 && w.fault("series/undecodable", content, 0.01) {
		i := int(w.draw("series/undecodable-which", content) % uint64(len(req.VariableIDs)))
		w.mu.Unlock()
		return &simVarError{simError{msg: "frame undecodable", index: i}}
	}
	frames := make([][]simPoint, len(req.VariableIDs))
	total := 0
	for i, id := range req.VariableIDs {
		frames[i] = w.frame(w.byID[id], req, content)
		total += len(frames[i])
	}
	if w.cfg.holdRows > 0 && total > w.cfg.holdRows && w.draw("series/results-first", content)%2 == 0 {
		w.mu.Unlock()
		return &simError{msg: "results served before columns, more rows than the decoder holds", tooLarge: true}
	}
	cutAt := -1
	if total > 0 && w.fault("series/cut-body", content, 0.05) {
		cutAt = int(w.draw("series/cut-body-at", content) % uint64(total))
	}
	// The frames are served as they stand now; what is written from here
	// on reaches the variables after their read, before its commit.
	s.p.moment(featAfterRead, "after-read", content, req.VariableIDs, req.Start, req.End)
	w.mu.Unlock()
	n := 0
	for i, f := range frames {
		for _, p := range f {
			if n == cutAt {
				return &simError{msg: "response body cut mid-stream", retryable: true}
			}
			n++
			if err := sink.Point(i, Point{TsMs: p.ts, Value: p.value, Context: []byte("{}")}); err != nil {
				return err
			}
		}
		if err := sink.EndFrame(i, len(f)); err != nil {
			return err
		}
	}
	return nil
}

// frame is v's frame for req: every point of the window, or the limit's
// cut of them, in the served order. Caller holds w.mu.
func (w *simWorld) frame(v *simVar, req SeriesRequest, content string) []simPoint {
	a, _ := slices.BinarySearchFunc(v.points, req.Start, func(p simPoint, t int64) int { return cmpInt(p.ts, t) })
	b, _ := slices.BinarySearchFunc(v.points, req.End+1, func(p simPoint, t int64) int { return cmpInt(p.ts, t) })
	in := slices.Clone(v.points[a:b])
	fc := content + "/" + v.id
	r := w.rngFor("frame", fc)
	if req.Limit > 0 && len(in) > req.Limit {
		cut := w.cfg.cut
		if cut == cutPerFrame {
			cut = simCut(r.IntN(3))
		} else if cut == cutMixed {
			cut = simCut(r.IntN(2))
		}
		switch cut {
		case cutNewest:
			in = in[len(in)-req.Limit:]
		case cutOldest:
			in = in[:req.Limit]
		default:
			r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
			in = in[:req.Limit]
			slices.SortFunc(in, func(x, y simPoint) int { return cmpInt(x.ts, y.ts) })
		}
	}
	order := w.cfg.order
	if order == orderPerFrame {
		order = simOrder(r.IntN(3))
	}
	switch order {
	case orderNewestFirst:
		slices.Reverse(in)
	case orderShuffled:
		r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
	}
	return in
}

func (s simCountingSource) Count(ctx context.Context, ids []string, start, end int64) ([]int64, error) {
	w := s.p.w
	content := fmt.Sprint(ids, start, end)
	w.sched.call("count " + content)
	w.mu.Lock()
	defer w.mu.Unlock()
	s.p.step("count", content)
	w.tick(content)
	s.during("count", content, ids, start, end)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if start < w.serviceFloor() {
		return nil, &simError{msg: "403003 past retention", retention: true}
	}
	switch w.cfg.counts {
	case countsRefused:
		return nil, &simError{msg: "400 count not accepted"}
	case countsFlaky:
		if w.chance("count/fail", content, 0.2) {
			return nil, &simError{msg: "502 Bad Gateway", retryable: true}
		}
	}
	out := make([]int64, len(ids))
	for i, id := range ids {
		v := w.byID[id]
		if v == nil || v.deleted {
			return nil, &simError{msg: "404 variable " + id, notFound: true, scoped: true}
		}
		if w.cfg.counts == countsUnavailable || (w.cfg.counts == countsFlaky && w.chance("count/none", content+id, 0.2)) {
			out[i] = -1
			continue
		}
		for _, p := range v.points {
			if p.ts >= start && p.ts <= end {
				out[i]++
			}
		}
	}
	return out, nil
}

// simWriter is the warehouse as one process writes it.
type simWriter struct{ p *simProc }

type simInsert struct {
	p    *simProc
	rows []Row
}

func (wr simWriter) Begin(context.Context) (Insert, error) {
	w := wr.p.w
	w.sched.call("begin an insert")
	w.mu.Lock()
	defer w.mu.Unlock()
	if wr.p.dead {
		return nil, &simError{msg: "connection refused (process stopped)", retryable: true}
	}
	return &simInsert{p: wr.p}, nil
}

func (in *simInsert) Append(c *Batch) error {
	for i := range c.Len() {
		in.rows = append(in.rows, Row{VariableID: c.VariableID[i], TsMs: c.TsMs[i], Value: c.Value[i]})
	}
	w := in.p.w
	w.sched.call(fmt.Sprintf("append %d rows", c.Len()))
	w.mu.Lock()
	defer w.mu.Unlock()
	if content := fmt.Sprint(c.VariableID[0], c.TsMs[0], c.Len()); c.Len() > 0 && w.fault("append", content, 0.01) {
		// load/clickhouse flushes each chunk as a block, and the server
		// writes a block as it arrives: the rows of the chunks before this
		// one may be stored, some or all, though the INSERT failed.
		sent := in.rows[:len(in.rows)-c.Len()]
		w.store(in.p, sent[:w.draw("append/stored", content)%uint64(len(sent)+1)])
		return &simError{msg: "write: broken pipe", retryable: true}
	}
	return nil
}

func (in *simInsert) Commit() error {
	w := in.p.w
	// The INSERT's content is its keys, hashed: its rows depend only on
	// the requests served, not on when the loader ran.
	h := fnv.New64a()
	var b [8]byte
	for _, r := range in.rows {
		h.Write([]byte(r.VariableID))
		binary.LittleEndian.PutUint64(b[:], uint64(r.TsMs))
		h.Write(b[:])
	}
	content := fmt.Sprintf("%d rows %x", len(in.rows), h.Sum64())
	w.sched.call("insert " + content)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checkWatermarks(in.p, in.rows)
	in.p.step("insert", content)
	in.p.moment(featAtCommit, "insert", content, rowIDs(in.rows), 0, 0)
	// part is a prefix of the rows: the blocks of an INSERT (or a
	// Distributed table's shards) are stored one by one, so a failure can
	// leave some of them stored.
	part := func() []Row { return in.rows[:w.draw("insert/part", content)%uint64(len(in.rows)+1)] }
	if in.p.dead {
		// A process killed mid-INSERT: none, some or all of its rows stored.
		switch w.draw("insert/dead-durable", content) % 3 {
		case 1:
			w.store(in.p, part())
		case 2:
			w.store(in.p, in.rows)
		}
		return &simError{msg: "connection reset (process stopped)", retryable: true}
	}
	level := w.cfg.level(faultInsert)
	switch x := w.draw("insert", content) % 1000; {
	case !w.quiet && float64(x) < 30*level:
		return &simError{msg: "INSERT failed before its rows were stored", retryable: true}
	case !w.quiet && float64(x) < 45*level:
		w.store(in.p, part())
		return &simError{msg: "INSERT failed after some of its rows were stored", retryable: true}
	case !w.quiet && float64(x) < 60*level:
		w.store(in.p, in.rows)
		return &simError{msg: "INSERT failed after its rows were stored", retryable: true}
	case !w.quiet && float64(x) < 65*level:
		return &simError{msg: "code 243: not enough space"}
	}
	w.store(in.p, in.rows)
	return nil
}

func (in *simInsert) Abort() {}

// store makes rows durable for p, checking each against the source.
// Caller holds w.mu.
func (w *simWorld) store(p *simProc, rows []Row) {
	p.noteStored(rows)
	for _, r := range rows {
		v := w.byID[r.VariableID]
		var want *simPoint
		if v != nil {
			if i, ok := slices.BinarySearchFunc(v.points, r.TsMs, func(p simPoint, t int64) int { return cmpInt(p.ts, t) }); ok {
				want = &v.points[i]
			}
		}
		if want == nil || want.value != r.Value {
			w.violate("stored %s@%d value %v, which the source never held", r.VariableID, r.TsMs, r.Value)
			continue
		}
		m := w.stored[r.VariableID]
		if m == nil {
			m = map[int64]float64{}
			w.stored[r.VariableID] = m
		}
		m[r.TsMs] = r.Value
	}
}

// rowIDs are the variables of rows, each once.
func rowIDs(rows []Row) []string {
	var ids []string
	for i, r := range rows {
		if i == 0 || r.VariableID != rows[i-1].VariableID {
			ids = append(ids, r.VariableID)
		}
	}
	return ids
}

// markIDs are the variables of marks.
func markIDs(marks []Mark) []string {
	ids := make([]string, len(marks))
	for i, m := range marks {
		ids[i] = m.VariableID
	}
	slices.Sort(ids)
	return ids
}

// sortedIDs is a call's content for the model's draws: its variable ids,
// sorted, since the order they come in is the scheduler's.
func sortedIDs[T any](items []T, id func(T) string) string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = id(it)
	}
	slices.Sort(ids)
	return fmt.Sprint(ids)
}

// simStore is the state store as one process uses it.
type simStore struct{ p *simProc }

func (s simStore) Load(ctx context.Context) (map[string]Mark, error) {
	w := s.p.w
	w.sched.call("load marks")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fault("marks/load", s.p.name+fmt.Sprint(w.now.Load()), 0.03) {
		return nil, &simError{msg: "marks: connection refused", retryable: true}
	}
	out := make(map[string]Mark, len(w.marks))
	for k, v := range w.marks {
		out[k] = v
	}
	return out, nil
}

// MarksOf is Load of some, one mark at a time (the same faults).
func (s simStore) MarksOf(ctx context.Context, ids []string, fn func(Mark) error) error {
	marks, err := s.Load(ctx)
	if err != nil {
		return err
	}
	return MarksOfMap(marks, ids, fn)
}

func (s simStore) Commit(_ context.Context, marks []Mark) error {
	w := s.p.w
	// Sorted: the order marks become ready in is the loaders'.
	content := sortedIDs(marks, func(m Mark) string { return m.VariableID })
	w.sched.call("commit marks " + sortedIDs(marks, func(m Mark) string { return fmt.Sprintf("%s@%+d", m.VariableID, m.HwmMs-simStart) }))
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := s.p.write("commit", content, "marks"); err != nil {
		return err
	}
	s.p.moment(featAtCommit, "commit", content, markIDs(marks), 0, 0)
	failAfter := false
	level := w.cfg.level(faultMarksCommit)
	switch x := w.draw("marks/commit", content) % 1000; {
	case !w.quiet && float64(x) < 20*level:
		return &simError{msg: "marks: INSERT failed", retryable: true}
	case !w.quiet && float64(x) < 40*level:
		failAfter = true
	}
	for _, m := range marks {
		w.checkMark(s.p, m)
		w.checkRolled(s.p, m)
		old, ok := w.marks[m.VariableID]
		merged := MergeMark(old, ok, m)
		// A debt of a longer lookback than a watermark's lowers it by the
		// difference (see checkWatermarks).
		for k := range w.watermarks {
			w.watermarks[k].widest = max(w.watermarks[k].widest, merged.LookbackMs)
		}
		// m won when the merge kept it, whatever reread (and the lookback
		// it is reckoned under) it took from the stored mark.
		won := merged
		won.RereadMs, won.LookbackMs = m.RereadMs, m.LookbackMs
		if won == m {
			w.noteRead(s.p, m)
		}
		w.marks[m.VariableID] = merged
	}
	if failAfter {
		return &simError{msg: "marks: connection reset after the INSERT", retryable: true}
	}
	return nil
}

// checkMark holds a committed mark to its promise: never ahead of the
// clock, and every point at or below it that existed when its run began
// (and that the run could reach and the contract promises) is stored,
// but those a backfill's mark still owes (owedBy). Caller holds w.mu.
func (w *simWorld) checkMark(p *simProc, m Mark) {
	if m.HwmMs > w.now.Load() {
		w.violate("%s committed %s's mark %d, ahead of the clock %d", p.name, m.VariableID, m.HwmMs, w.now.Load())
	}
	v := w.byID[m.VariableID]
	if v == nil {
		w.violate("%s committed a mark for %s, a variable the source never had", p.name, m.VariableID)
		return
	}
	lo, owed := w.reachable(), w.owedBy(p, m)
	var missing []simPoint
	for _, pt := range v.points {
		if pt.ts > m.HwmMs {
			break
		}
		if pt.ts < lo || pt.ts < pt.from || owed(pt) || pt.seq > p.startSeq {
			continue
		}
		if _, ok := w.stored[v.id][pt.ts]; !ok {
			missing = append(missing, pt)
		}
	}
	if len(missing) > 0 {
		w.violate("%s committed %s's mark at %s ms with %d points at or below it not stored (first %s)", p.name, v.id, fmtRel(m.HwmMs), len(missing), missing[0])
	}
}
