package fleetapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// limiter spaces the Client's requests at its current rate, which it learns
// from the service's answers (see adapt.go), never above a configured cap,
// and holds every request back while the service has asked for a pause
// (a Retry-After, a 420). All requests of a Client share one token, and
// the service limits per token, so they share one limiter.
//
// Spacing is the generic cell rate algorithm without a burst: tat is the
// theoretical arrival time of the next request, and a request goes at
// max(now, tat). Sending evenly is what a token bucket on the other side
// admits best.
type limiter struct {
	// cap is the configured hard cap in requests per second; 0 means none.
	cap float64
	now func() time.Time
	// rate reports the rate in force (0: unlimited); nil for none.
	rate prometheus.Gauge

	mu     sync.Mutex
	tat    time.Time
	paused time.Time // no request goes before this instant
	adapt  adaptState
	// cuts counts the times a 429 lowered the rate: a slot booked before
	// a cut is booked again at the new rate (see Wait).
	cuts uint64
}

// newLimiter returns a limiter capped at perSecond (0: no cap) that starts
// cautiously at start (see adapt.go), or unlimited below the cap when start
// is 0. gauge may be nil.
func newLimiter(perSecond, start float64, now func() time.Time, gauge prometheus.Gauge) *limiter {
	l := &limiter{cap: max(perSecond, 0), now: now, rate: gauge}
	if start > 0 {
		l.adapt.start(start)
	}
	l.report()
	return l
}

// Seed starts the learning over from what an earlier limiter learned.
func (l *limiter) Seed(r LearnedRate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.adapt.seed(r)
	l.report()
}

// Learned returns what to seed a later limiter with.
func (l *limiter) Learned() LearnedRate {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.adapt.learned()
}

// effective is the rate requests are spaced at, 0 for unlimited. mu held.
func (l *limiter) effective() float64 {
	r := l.adapt.rate
	if l.cap > 0 && (r == 0 || r > l.cap) {
		r = l.cap
	}
	return r
}

// report sets the gauge to the rate in force. mu held (or not yet shared).
func (l *limiter) report() {
	if l.rate != nil {
		l.rate.Set(l.effective())
	}
}

// Rate returns the request rate in force, in requests per second; 0 means
// unlimited.
func (l *limiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effective()
}

// Wait blocks until the caller may send, or ctx ends. A slot reserved by a
// caller whose context ends is not given back; that only makes the limit
// stricter. A slot booked before a 429 lowered the rate is booked again
// when it comes: the slots booked ahead at the old rate would otherwise all
// go, and be answered 429 too.
func (l *limiter) Wait(ctx context.Context) error {
	for {
		at, booked := l.reserve()
		if err := sleepUntil(ctx, at, l.now); err != nil {
			return err
		}
		if !l.cutSince(booked) {
			return nil
		}
	}
}

// cutSince reports whether a 429 lowered the rate since the cut count was
// booked.
func (l *limiter) cutSince(booked uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cuts != booked
}

// reserve books the next slot and returns when it is, with the count of
// cuts it was booked under.
func (l *limiter) reserve() (time.Time, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.adapt.sending(now)
	at := now
	if l.paused.After(at) {
		at = l.paused
	}
	if r := l.effective(); r > 0 {
		if l.tat.After(at) {
			at = l.tat
		}
		l.tat = at.Add(time.Duration(float64(time.Second) / r))
	}
	l.adapt.last = at
	return at, l.cuts
}

// Observe learns from one answer of the service: its status, and the
// instant its Retry-After named (zero for none), before which no request
// of the Client goes. A 429 with a Retry-After is the service pacing the
// client itself: the pause is all it asks for, and the learned rate does
// not move (so 429s shed for other reasons than the rate, which such
// services tend to send with a Retry-After, do not drag it down). Only a
// 429 without one, as the hosted service sends, teaches the rate.
func (l *limiter) Observe(status int, retryAt time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if retryAt.After(l.paused) {
		l.paused = retryAt
	}
	switch {
	case status == http.StatusTooManyRequests:
		if retryAt.IsZero() {
			before := l.effective()
			l.adapt.throttled(now, l.cap)
			if r := l.effective(); r > 0 && (before == 0 || r < before) {
				// The bucket is empty: the next slot is one interval at
				// the new rate from now, and the slots booked at the old
				// rate are booked again.
				l.cuts++
				l.tat = now.Add(time.Duration(float64(time.Second) / r))
			}
		}
	case status != StatusAPILimitExceeded:
		l.adapt.admitted(now, l.cap)
	}
	l.report()
}

// Pause holds every request back until t.
func (l *limiter) Pause(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.After(l.paused) {
		l.paused = t
	}
}

// sleepUntil waits until the clock reads at least t, or ctx ends.
func sleepUntil(ctx context.Context, t time.Time, now func() time.Time) error {
	for {
		d := t.Sub(now())
		if d <= 0 {
			return ctx.Err()
		}
		tm := time.NewTimer(d)
		select {
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		case <-tm.C:
		}
	}
}
