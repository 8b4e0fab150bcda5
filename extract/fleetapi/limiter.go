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
}

// newLimiter returns a limiter capped at perSecond (0: no cap) that starts
// unlimited below the cap. gauge may be nil.
func newLimiter(perSecond float64, now func() time.Time, gauge prometheus.Gauge) *limiter {
	l := &limiter{cap: max(perSecond, 0), now: now, rate: gauge}
	l.report()
	return l
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
// stricter.
func (l *limiter) Wait(ctx context.Context) error {
	return sleepUntil(ctx, l.reserve(), l.now)
}

// reserve books the next slot and returns when it is.
func (l *limiter) reserve() time.Time {
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
	return at
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
			l.adapt.throttled(now, l.cap)
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
