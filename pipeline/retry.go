package pipeline

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// RetryPolicy is how fleetsync waits between attempts of anything that may
// succeed later (an API request, an INSERT, a raw-series read cut
// mid-stream): exponential backoff on cenkalti/backoff/v4, so every retry
// loop of the program grows, caps and jitters its waits the same way and
// can be reasoned about in one place. The policies themselves, one per loop,
// are the table in retries.go. Each loop still decides what is retryable
// where the failure is seen and stops when its context ends.
type RetryPolicy struct {
	// Initial is the first wait; each next one is Multiplier times the
	// last, up to Max.
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	// MaxElapsed ends the retries once that much time has passed since the
	// first attempt; 0 means the caller bounds them by a count instead.
	MaxElapsed time.Duration
	// Jitter spreads each wait by ±Jitter of itself, so that many clients
	// that failed together do not retry together; 0 waits exactly.
	Jitter float64
}

// NewBackOff starts one retry sequence of the policy.
func (p RetryPolicy) NewBackOff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = p.Initial
	b.MaxInterval = p.Max
	b.MaxElapsedTime = p.MaxElapsed
	b.Multiplier = p.Multiplier
	b.RandomizationFactor = p.Jitter
	b.Reset()
	return b
}
