package fleetapi

import (
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"
)

// bucketRun is the outcome of simulateBucket.
type bucketRun struct {
	admitted, rejected         int
	admittedLate, rejectedLate int // after the first 10 s
	lateSpan                   time.Duration
	finalRate                  float64
}

// simulateBucket runs the limiter against a token bucket of rate r and
// burst b on a simulated clock: workers send back to back (a 429 is retried
// after 250ms), each request arrives when the limiter lets it go and is
// answered lat later.
func simulateBucket(r float64, b, workers int, lat, span time.Duration) bucketRun {
	start := time.Unix(1000, 0)
	now := start
	l := newLimiter(0, func() time.Time { return now }, nil)
	type event struct {
		at     time.Time
		kind   int // 0 ready, 1 arrive, 2 respond
		status int
	}
	var q []event
	for range workers {
		q = append(q, event{at: start})
	}
	level, filled := float64(b), start
	settle := time.Duration(40 / r * float64(time.Second))
	var out bucketRun
	for len(q) > 0 {
		sort.SliceStable(q, func(i, j int) bool { return q[i].at.Before(q[j].at) })
		e := q[0]
		q = q[1:]
		if e.at.Sub(start) > span {
			break
		}
		now = e.at
		switch e.kind {
		case 0:
			q = append(q, event{at: l.reserve(), kind: 1})
		case 1:
			level = min(float64(b), level+now.Sub(filled).Seconds()*r)
			filled = now
			st := http.StatusOK
			if level < 1 {
				st = http.StatusTooManyRequests
			} else {
				level--
			}
			late := now.Sub(start) >= settle
			switch {
			case st == http.StatusOK:
				out.admitted++
				if late {
					out.admittedLate++
				}
			default:
				out.rejected++
				if late {
					out.rejectedLate++
				}
			}
			q = append(q, event{at: now.Add(lat), kind: 2, status: st})
		case 2:
			l.Observe(e.status, time.Time{})
			next := now
			if e.status != http.StatusOK {
				next = now.Add(250 * time.Millisecond)
			}
			q = append(q, event{at: next})
		}
	}
	out.finalRate = l.Rate()
	return out
}

func TestAdaptiveRateConvergesBelowATokenBucketOfAnyBurst(t *testing.T) {
	for _, c := range []struct {
		rate    float64
		burst   int
		workers int
		lat     time.Duration
		// floor is the share of the limit the sync must reach: 90 %,
		// except with a burst of 1, where every request that arrives a
		// little late loses refill the bucket cannot hold, and the
		// client settles lower.
		floor float64
	}{
		{4, 4, 4, 5 * time.Millisecond, 0.90},
		{4, 4, 4, 50 * time.Millisecond, 0.90},
		{4, 2, 4, 50 * time.Millisecond, 0.90},
		{4, 20, 4, 50 * time.Millisecond, 0.90},
		{4, 4, 1, 50 * time.Millisecond, 0.90},
		{10, 10, 4, 20 * time.Millisecond, 0.90},
		{1, 2, 4, 50 * time.Millisecond, 0.90},
		{2, 1, 4, 50 * time.Millisecond, 0.70},
	} {
		t.Run(fmt.Sprintf("R=%v B=%d workers=%d latency=%s", c.rate, c.burst, c.workers, c.lat), func(t *testing.T) {
			// A first sync of 240 requests' worth.
			span := time.Duration(240 / c.rate * float64(time.Second))
			out := simulateBucket(c.rate, c.burst, c.workers, c.lat, span)
			achieved := float64(out.admitted) / span.Seconds() / c.rate
			lateShare := float64(out.rejectedLate) / float64(out.admittedLate+out.rejectedLate)
			t.Logf("achieved %.1f%% of the limit; %d rejected in all, %d of %d (%.1f%%) after the first 40; final rate %.2f/s",
				100*achieved, out.rejected, out.rejectedLate, out.admittedLate+out.rejectedLate, 100*lateShare, out.finalRate)
			if achieved < c.floor {
				t.Errorf("achieved %.1f%% of the limit, want at least %.0f%%", 100*achieved, 100*c.floor)
			}
			if lateShare >= 0.02 {
				t.Errorf("%.1f%% of the requests after the first 40 were rejected, want under 2%%", 100*lateShare)
			}
		})
	}
}
