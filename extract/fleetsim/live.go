package fleetsim

import (
	"math/rand"
	"time"
)

// liveState is live mode's bookkeeping, guarded by Sim.mu.
type liveState struct {
	rnd              *rand.Rand
	newDue, lateDue  float64 // fractional points carried between ticks
	added, lateAdded int
}

const liveTick = 100 * time.Millisecond

// maxLiveStep bounds the time one step adds points for. A step late
// behind its tick (a loaded machine, a stop in a debugger) would
// otherwise add every point due meanwhile at once, and a late point costs
// a copy of its variable's overlay: a step longer than the last made the
// next longer still, until one held the lock for minutes (a CI run's
// TestReadsStreamWhileLivePointsArrive timed out so). Live rates are best
// effort past it.
const maxLiveStep = time.Second

// runLive adds points at the configured rates until Close.
func (s *Sim) runLive() {
	defer close(s.done)
	s.live.rnd = rand.New(rand.NewSource(s.opts.Seed ^ 0x11fe))
	t := time.NewTicker(liveTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			dt := now.Sub(last).Seconds()
			last = now
			s.liveStep(dt)
		}
	}
}

// liveStep adds the points due after dt seconds.
func (s *Sim) liveStep(dt float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.live
	dt = min(dt, maxLiveStep.Seconds())
	l.newDue += dt * s.opts.Live.PointsPerSecond
	l.lateDue += dt * s.opts.Live.LatePointsPerSecond
	maxAge := s.opts.Live.LateMaxAge
	if maxAge <= 0 {
		maxAge = 10 * time.Minute
	}
	nowMs := s.now().UnixMilli()
	for ; l.newDue >= 1; l.newDue-- {
		v := s.randomVariable()
		if v == nil {
			break
		}
		ts := nowMs
		if newest, ok := v.ser.newestTs(); ok && newest >= ts {
			ts = newest + 1
		}
		s.writePoint(v, ts, nowMs, l.rnd)
		l.added++
	}
	for ; l.lateDue >= 1; l.lateDue-- {
		v := s.randomVariable()
		if v == nil {
			break
		}
		newest, ok := v.ser.newestTs()
		if !ok {
			newest = nowMs
		}
		// Pick a free timestamp behind the newest point; after a few
		// collisions the point replaces the one it met.
		var ts int64
		for try := 0; try < 4; try++ {
			ts = newest - 1 - l.rnd.Int63n(maxAge.Milliseconds())
			c := v.ser.cursor(ts, ts)
			if !c.next() {
				break
			}
		}
		s.writePoint(v, ts, nowMs, l.rnd)
		l.lateAdded++
	}
}

// randomVariable picks a variable uniformly over devices, then over the
// device's variables. Caller holds s.mu.
func (s *Sim) randomVariable() *variable {
	for try := 0; try < 8 && len(s.devices) > 0; try++ {
		d := s.devices[s.live.rnd.Intn(len(s.devices))]
		if len(d.vars) > 0 {
			return d.vars[s.live.rnd.Intn(len(d.vars))]
		}
	}
	return nil
}

// writePoint stores a point at ts written at nowMs, valued like the
// variable's generated ones (always finite). Live mode and writers use it.
// Caller holds s.mu.
func (s *Sim) writePoint(v *variable, ts, nowMs int64, rnd *rand.Rand) {
	g := v.ser.gen
	i := int(rnd.Int31())
	p := overlayPoint{ts: ts, created: nowMs, value: g.value(g.nOld+i%max(g.n, 1), ts)}
	if g.kind == kindPosition || g.ctxBytes > 0 {
		p.ctx = g.appendContext(nil, i)
	}
	v.ser.insert(p)
	v.noteWrite(nowMs)
}
