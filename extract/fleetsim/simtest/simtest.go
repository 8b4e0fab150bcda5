// Package simtest holds what the tests of the simulator and of the clients
// that read it share: a clock they move by hand and a float comparison for
// the simulator's aggregates. It is imported only by tests.
package simtest

import (
	"math"
	"sync"
	"time"
)

// Clock is a clock a test sets and advances, handed to fleetsim.Options.Now
// so that retention floors and token expiry move only when the test says.
// It is safe for concurrent use, because the simulator reads it from its
// handlers while the test advances it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Near reports whether a equals b within the rounding an aggregate of float
// values may pick up (one part in a billion, absolute below 1), since the
// simulator and the client may sum the same values in another order.
func Near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
