package fleetsim

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"time"
)

// WriterOptions sets what a Writer adds at each step. Zero durations take
// their defaults; zero counts mean none of that kind.
type WriterOptions struct {
	// Seed makes the writer's choices (variables, late timestamps, values,
	// the report-once variables) reproducible for a given clock.
	Seed int64
	// Interval is the time between steps (default 20ms).
	Interval time.Duration
	// NewPerStep is the number of new points per step, each on a variable
	// drawn at random: timestamp Now(), or its newest point's timestamp + 1
	// when Now() is not newer.
	NewPerStep int
	// LatePerStep is the number of late points per step, each at a free
	// timestamp in [newest-LateMaxAge, newest) of a variable drawn at
	// random (newest is Now() for an empty variable). A late point never
	// replaces a point; when the range is full, none is written.
	LatePerStep int
	// LateMaxAge bounds how far behind the newest point a late point
	// lands (default 30m).
	LateMaxAge time.Duration
	// AheadMax, when > 0, stamps about a quarter of the new points
	// Now() + a random 1ms..AheadMax instead, like a device whose clock
	// runs ahead (its newest+1 if that instant is taken).
	AheadMax time.Duration
	// ReportOnce is the fraction in [0, 1] of the variables (rounded up,
	// chosen by Seed at start) that get exactly one new point, in the first
	// step, and then nothing more during the run.
	ReportOnce float64
	// Variables, when non-empty, are the only variable ids written to;
	// default every variable of the fleet at start. A variable deleted
	// during the run is skipped from then on.
	Variables []string
}

// WriterStats counts the points a writer wrote, by kind; their sum is the
// number of points it added.
type WriterStats struct {
	// New counts new points stamped Now() (or just past the newest).
	New int
	// Late counts late points, behind their variable's newest.
	Late int
	// Ahead counts new points stamped ahead of Now() on purpose
	// (WriterOptions.AheadMax).
	Ahead int
	// ReportOnce counts the single points of the report-once variables.
	ReportOnce int
}

// Writer adds points to the simulator in the background, step by step, so
// that tests can drive a live fleet and then compare with the oracles
// (Points, PointCount). Start one with Sim.StartWriter and end it with Stop.
type Writer struct {
	s    *Sim
	o    WriterOptions
	rnd  *rand.Rand // used by one step at a time
	pool []string   // ids that get new and late points
	once []string   // report-once ids
	// onceDone is set after the first step wrote the report-once points.
	onceDone bool

	statsMu sync.Mutex
	stats   WriterStats

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// StartWriter checks o, writes the writer's first step (so the report-once
// variables have their point when it returns) and goes on writing a step
// every o.Interval until Stop or Close. Unknown variable ids give
// ErrNotFound.
func (s *Sim) StartWriter(o WriterOptions) (*Writer, error) {
	switch {
	case o.Interval < 0 || o.LateMaxAge < 0 || o.AheadMax < 0:
		return nil, errors.New("fleetsim: writer: interval, late max age and ahead max must not be negative")
	case o.NewPerStep < 0 || o.LatePerStep < 0:
		return nil, errors.New("fleetsim: writer: points per step must not be negative")
	case !(o.ReportOnce >= 0 && o.ReportOnce <= 1):
		return nil, fmt.Errorf("fleetsim: writer: report-once fraction %v is not in [0, 1]", o.ReportOnce)
	}
	if o.Interval == 0 {
		o.Interval = 20 * time.Millisecond
	}
	if o.LateMaxAge == 0 {
		o.LateMaxAge = 30 * time.Minute
	}
	o.Variables = append([]string(nil), o.Variables...)
	w := &Writer{s: s, o: o, rnd: rand.New(rand.NewSource(o.Seed)), stop: make(chan struct{}), done: make(chan struct{})}

	var ids []string
	s.mu.RLock()
	if len(o.Variables) == 0 {
		for _, v := range s.allVariables() {
			ids = append(ids, v.id)
		}
	} else {
		seen := map[string]bool{}
		for _, id := range o.Variables {
			if _, ok := s.vars[id]; !ok {
				s.mu.RUnlock()
				return nil, fmt.Errorf("start writer: variable %s: %w", id, ErrNotFound)
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	s.mu.RUnlock()

	k := 0
	if o.ReportOnce > 0 {
		k = min(int(math.Ceil(o.ReportOnce*float64(len(ids))-1e-9)), len(ids))
	}
	chosen := map[int]bool{}
	for _, i := range w.rnd.Perm(len(ids))[:k] {
		chosen[i] = true
	}
	for i, id := range ids {
		if chosen[i] {
			w.once = append(w.once, id)
		} else {
			w.pool = append(w.pool, id)
		}
	}

	w.step()
	s.writersMu.Lock()
	s.writers[w] = struct{}{}
	s.writersMu.Unlock()
	go w.run()
	return w, nil
}

// ReportOnceVariables returns the ids of the report-once variables, in list
// order.
func (w *Writer) ReportOnceVariables() []string {
	return append([]string(nil), w.once...)
}

// Stats returns the counts of points written so far.
func (w *Writer) Stats() WriterStats {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	return w.stats
}

// Stop ends the writer: it returns once the writer's last step is written,
// with the final counts. It is safe to call more than once.
func (w *Writer) Stop() WriterStats {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	w.s.writersMu.Lock()
	delete(w.s.writers, w)
	w.s.writersMu.Unlock()
	return w.Stats()
}

func (w *Writer) run() {
	defer close(w.done)
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		// A tick and a stop may both be ready; stop wins.
		select {
		case <-w.stop:
			return
		default:
		}
		w.step()
	}
}

// step writes one step's points under the write lock.
func (w *Writer) step() {
	s := w.s
	var st WriterStats
	s.mu.Lock()
	nowMs := s.now().UnixMilli()
	if !w.onceDone {
		w.onceDone = true
		for _, id := range w.once {
			if v := s.vars[id]; v != nil {
				s.writePoint(v, nextTs(v, nowMs), nowMs, w.rnd)
				st.ReportOnce++
			}
		}
	}
	vars := make([]*variable, 0, len(w.pool))
	for _, id := range w.pool {
		if v := s.vars[id]; v != nil {
			vars = append(vars, v)
		}
	}
	for i := 0; i < w.o.NewPerStep && len(vars) > 0; i++ {
		v := vars[w.rnd.Intn(len(vars))]
		if w.o.AheadMax > 0 && w.rnd.Intn(4) == 0 {
			ts := nowMs + 1 + w.rnd.Int63n(max(w.o.AheadMax.Milliseconds(), 1))
			if c := v.ser.cursor(ts, ts); c.next() {
				// Taken: the newest is then at least ts, so its
				// successor is ahead of now too.
				ts = nextTs(v, ts)
			}
			s.writePoint(v, ts, nowMs, w.rnd)
			st.Ahead++
			continue
		}
		s.writePoint(v, nextTs(v, nowMs), nowMs, w.rnd)
		st.New++
	}
	maxAge := max(w.o.LateMaxAge.Milliseconds(), 1)
	for i := 0; i < w.o.LatePerStep && len(vars) > 0; i++ {
		v := vars[w.rnd.Intn(len(vars))]
		newest, ok := v.ser.newestTs()
		if !ok {
			newest = nowMs
		}
		if ts, free := freeTsBehind(v, newest-maxAge, newest-1, w.rnd); free {
			s.writePoint(v, ts, nowMs, w.rnd)
			st.Late++
		}
	}
	s.mu.Unlock()

	w.statsMu.Lock()
	w.stats.New += st.New
	w.stats.Late += st.Late
	w.stats.Ahead += st.Ahead
	w.stats.ReportOnce += st.ReportOnce
	w.statsMu.Unlock()
}

// nextTs is the timestamp of a new point written at nowMs: nowMs, or the
// newest point's timestamp + 1 when nowMs is not newer.
func nextTs(v *variable, nowMs int64) int64 {
	if newest, ok := v.ser.newestTs(); ok && newest >= nowMs {
		return newest + 1
	}
	return nowMs
}

// freeTsBehind picks a timestamp in [lo, hi] where v has no point: a few
// random tries, then the newest gap. free is false when the range is full.
func freeTsBehind(v *variable, lo, hi int64, rnd *rand.Rand) (ts int64, free bool) {
	if lo > hi {
		return 0, false
	}
	for try := 0; try < 8; try++ {
		ts = hi - rnd.Int63n(hi-lo+1)
		if c := v.ser.cursor(ts, ts); !c.next() {
			return ts, true
		}
	}
	want := hi
	c := v.ser.cursor(lo, hi)
	for c.next() {
		if c.ts < want {
			return want, true
		}
		want = c.ts - 1
	}
	return want, want >= lo
}
