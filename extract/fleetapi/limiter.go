package fleetapi

import (
	"context"
	"sync"
	"time"
)

// limiter spaces requests at no more than a given rate, letting a burst of
// up to `burst` requests through at once after an idle period. It is the
// generic cell rate algorithm: tat is the theoretical arrival time of the
// next request; a request may go at tat - (burst-1)*interval.
type limiter struct {
	interval time.Duration
	slack    time.Duration
	now      func() time.Time

	mu  sync.Mutex
	tat time.Time
}

// newLimiter returns nil (no limit) for a non-positive rate.
func newLimiter(perSecond float64, burst int, now func() time.Time) *limiter {
	if perSecond <= 0 {
		return nil
	}
	if burst < 1 {
		burst = 1
	}
	iv := time.Duration(float64(time.Second) / perSecond)
	if iv <= 0 {
		return nil
	}
	return &limiter{interval: iv, slack: time.Duration(burst-1) * iv, now: now}
}

// Wait blocks until the caller may send, or ctx ends. A slot reserved by a
// caller whose context ends is not given back; that only makes the limit
// stricter.
func (l *limiter) Wait(ctx context.Context) error {
	if l == nil {
		return ctx.Err()
	}
	l.mu.Lock()
	now := l.now()
	tat := l.tat
	if tat.Before(now) {
		tat = now
	}
	at := tat.Add(-l.slack)
	if at.Before(now) {
		at = now
	}
	l.tat = tat.Add(l.interval)
	l.mu.Unlock()
	return sleepUntil(ctx, at, l.now)
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
