package pipeline_test

// The simulation's scheduler: why a seed replays exactly. Each seed runs
// in a testing/synctest bubble, so its clock is virtual: the committer's
// ticker, the loaders' batch-age timers, the re-read backoffs and every
// time.Now the engine paces itself by start at the same instant and move
// only when the scheduler lets them. And one goroutine acts at a time,
// the one the seed picks:
//
//   - every goroutine of a run takes its turn (EngineOptions.Turns,
//     turns.go) as it starts and whenever it goes on after waiting for
//     another goroutine or for time; each process's own goroutine takes one
//     as it starts;
//   - every call of a model (a walk, a raw-series or count request, an
//     INSERT's begin, append and commit, a load or commit of marks, a
//     rollup, a metadata write) parks its caller first, so the processes
//     and goroutines interleave there too;
//   - the scheduler waits until every other goroutine of the bubble is
//     durably blocked (synctest.Wait: parked, or waiting on a channel, a
//     condition or a timer), then lets exactly one parked goroutine go on,
//     drawn with the seed's generator from the parked ones sorted by name,
//     and notes it (with the call) in the trace. When none is parked, it
//     blocks, and the bubble's clock jumps to the next timer.
//
// A goroutine another one woke parks before it touches anything shared, so
// between two quiescent points only the goroutine let go acts: the state
// the next choice is made in, and the choice, are the seed's. Time passes
// only while nothing is parked (then every goroutine waits where its timer
// is read) or, at the seed's choice, by less than the committer's tick
// while neither the committer nor a loader is parked: a timer never fires
// while its goroutine is away from the select that reads it, where a
// ready timer beside a ready channel would be chosen at random.

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing/synctest"
	"time"
)

// simSched lets one goroutine of a seed's bubble go on at a time.
type simSched struct {
	w   *simWorld
	rng *rand.Rand
	// timeEvery is how rarely the seed lets time pass while goroutines
	// are parked: one quiescent point in timeEvery (0: never).
	timeEvery int

	mu      sync.Mutex
	parked  []*simParked
	cur     string // the goroutine last let go
	twice   bool   // two goroutines parked under one name
	wake    chan struct{}
	done    chan struct{}
	started time.Time
}

// simParked is a goroutine waiting to be let go: who it is and, at a
// model's call, what it calls.
type simParked struct {
	who, what string
	ready     chan struct{}
}

// simMaxVirtual bounds a seed's virtual time: a run whose goroutines only
// ever wait for timers (the committer ticks every second) would otherwise
// tick for ever.
const simMaxVirtual = 1000 * time.Hour

func newSimSched(w *simWorld) *simSched {
	rng := rand.New(rand.NewPCG(w.seed, 0x5c4ed))
	return &simSched{w: w, rng: rng, timeEvery: []int{0, 8, 64}[rng.IntN(3)],
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// park blocks the calling goroutine, who, until the scheduler lets it go.
func (s *simSched) park(who, what string) {
	p := &simParked{who: who, what: what, ready: make(chan struct{})}
	s.mu.Lock()
	s.parked = append(s.parked, p)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-p.ready
}

// call parks the goroutine that runs (the one last let go) at a model's call.
func (s *simSched) call(what string) {
	s.mu.Lock()
	who := s.cur
	s.mu.Unlock()
	s.park(who, what)
}

// turns is EngineOptions.Turns for the process proc.
func (s *simSched) turns(proc string) func(name string) func() {
	return func(name string) func() {
		who := proc + "/" + name
		return func() { s.park(who, "") }
	}
}

// run schedules until stop.
func (s *simSched) run() {
	s.started = time.Now()
	for {
		synctest.Wait()
		if time.Since(s.started) > simMaxVirtual {
			panic("simulation: seed " + s.w.cfg.String() + " passed " + simMaxVirtual.String() + " of virtual time; its goroutines wait for each other")
		}
		s.mu.Lock()
		if len(s.parked) == 0 {
			s.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			}
		}
		if s.timeEvery > 0 && s.rng.IntN(s.timeEvery) == 0 && s.timeMayPass() {
			s.mu.Unlock()
			time.Sleep(time.Duration(1+s.rng.Int64N(999)) * time.Millisecond)
			continue
		}
		slices.SortStableFunc(s.parked, func(a, b *simParked) int { return strings.Compare(a.who, b.who) })
		for i := 1; i < len(s.parked); i++ {
			if s.parked[i].who == s.parked[i-1].who && !s.twice {
				// The second ran without its turn: a model call took the
				// name of the goroutine let go last. The order they parked
				// in is the Go scheduler's, not the seed's.
				s.twice = true
				s.w.mu.Lock()
				s.w.violate("two goroutines parked as %s: one went on without taking its turn (turns.go), so the seed does not replay exactly", s.parked[i].who)
				s.w.mu.Unlock()
			}
		}
		i := s.rng.IntN(len(s.parked))
		p := s.parked[i]
		s.parked = slices.Delete(s.parked, i, i+1)
		s.cur = p.who
		s.mu.Unlock()
		if p.what != "" {
			// logf's line, without fmt: a seed notes thousands.
			s.w.mu.Lock()
			s.w.trace = append(s.w.trace, "[t="+strconv.FormatInt(s.w.now.Load()-simStart, 10)+"] "+p.who+": "+p.what)
			s.w.mu.Unlock()
		}
		close(p.ready)
	}
}

// timeMayPass is true when neither a committer nor a loader is parked: each
// waits in its select, where a timer that fires wakes it. Caller holds s.mu.
func (s *simSched) timeMayPass() bool {
	for _, p := range s.parked {
		if strings.Contains(p.who, "/committer") || strings.Contains(p.who, "/loader ") {
			return false
		}
	}
	return true
}

// stop ends run once every process has ended.
func (s *simSched) stop() { close(s.done) }
