package fleetapi

import "time"

// How the Client learns the service's request limit without being told it.
//
// The service limits each token with what behaves like a token bucket: a
// rate R and a burst B it does not document. The client starts unlimited
// (below the configured cap), so a service without a limit costs nothing.
// The first 429 says the bucket is empty at that instant. Between two
// instants at which the bucket is empty, the service admitted exactly what
// it refilled, R per second (give or take one request, and minus what it
// could not hold while the client sent slower than R for long): so the
// requests answered since the first 429 of a busy period, divided by the
// time since, estimate R, better the longer the span. On each 429 the rate
// goes to a margin below that estimate; other 429s within a second are the
// echo of the same overshoot and change nothing.
//
// Between 429s the rate grows: fast (by a quarter per second) until the
// first estimate, then, after holding for a while below the estimate, by a
// percent per second, to find a limit that was raised. Probing costs one 429
// per probe, and a probe starts at most every probeHold, which keeps the
// share of rejected requests near 1 % at 4 requests per second.
//
// After an idle gap (a pause, the time between two daemon cycles) the
// bucket has filled again, so the count starts over at the next 429; the
// rate learned so far stays.
const (
	// minRate is the lowest rate the client goes down to.
	minRate = 0.1
	// rejectHoldoff is how long after a 429 acted upon others are ignored.
	rejectHoldoff = time.Second
	// rateMargin is the fraction of the estimated limit the client keeps to.
	rateMargin = 0.97
	// throttleCut is the decrease on the first 429 of a busy period when a
	// rate was learned before.
	throttleCut = 0.9
	// startGrowth and probeGrowth are the growth per second of the rate
	// before the first estimate and after the hold.
	startGrowth = 0.25
	probeGrowth = 0.01
	// probeHold is how long the rate holds after a 429 before probing,
	// and holdRequests the same in requests at the rate, whichever is
	// longer: one probe (one 429) per so many requests.
	probeHold    = 20 * time.Second
	holdRequests = 80
	// idleGap ends a busy period: no request was sent for this long.
	idleGap = 2 * time.Second
	// minSamples is how many answers an estimate needs: the count is
	// exact to one request.
	minSamples = 10
)

// phase is where the learning stands.
type phase int

const (
	// unlimited: no 429 seen yet.
	unlimited phase = iota
	// starting: one 429 seen; the rate grows fast from what got through.
	starting
	// measuring: the rate sits a margin below where a 429 came while
	// growing, which is above the limit unless the burst hid it; the next
	// 429 gives an estimate.
	measuring
	// steady: the rate follows the estimate, holds, then probes.
	steady
)

// adaptState is the learning part of the limiter; the limiter's mutex
// guards it.
type adaptState struct {
	phase phase
	// rate is the learned rate in requests per second; 0 while unlimited.
	rate float64
	// estimate is the service's limit as last estimated; 0 for none yet.
	estimate float64
	// last is when the last request was scheduled to go.
	last time.Time
	// busySince and busyAnswered: the current busy period and the
	// requests answered (not throttled) in it.
	busySince    time.Time
	busyAnswered int
	// anchor is the last 429 acted upon in this busy period (zero: none
	// yet), and answered counts the requests answered since.
	anchor   time.Time
	answered int
	// low is the lowest rate in force since the anchor.
	low float64
	// acted is the last 429 acted upon; grown the last growth step.
	acted, grown time.Time
	// holdUntil is when the rate may grow again.
	holdUntil time.Time
}

// sending notes a request about to be scheduled at now.
func (a *adaptState) sending(now time.Time) {
	if a.last.IsZero() || now.Sub(a.last) > idleGap {
		a.busySince, a.busyAnswered = now, 0
		a.anchor, a.answered = time.Time{}, 0
	}
}

// admitted learns from an answer that was not a rate limit.
func (a *adaptState) admitted(now time.Time, cap float64) {
	a.busyAnswered++
	a.answered++
	if a.phase == unlimited {
		return
	}
	if now.Before(a.holdUntil) || a.grown.IsZero() {
		a.grown = now
		return
	}
	g := probeGrowth
	if a.phase == starting {
		g = startGrowth
	}
	a.rate *= 1 + g*now.Sub(a.grown).Seconds()
	a.grown = now
	if cap > 0 && a.rate > cap {
		a.rate = cap
	}
	a.low = min(a.low, a.rate)
}

// throttled learns from a 429.
func (a *adaptState) throttled(now time.Time, cap float64) {
	holdoff := rejectHoldoff
	if a.rate > 0 {
		holdoff = max(holdoff, time.Duration(2*float64(time.Second)/a.rate))
	}
	if !a.acted.IsZero() && now.Sub(a.acted) < holdoff {
		return
	}
	a.acted, a.grown = now, now
	// The bucket is empty now, as it was at the anchor.
	anchor, answered, low := a.anchor, a.answered, a.low
	a.anchor, a.answered = now, 0
	switch {
	case a.phase == unlimited:
		// What got through in the last second, burst included, is where
		// the fast growth starts from.
		span := max(now.Sub(a.busySince).Seconds(), 1)
		a.rate = float64(a.busyAnswered) / span
		a.phase = starting
	case anchor.IsZero():
		// The first 429 after an idle gap: the limit may have changed.
		a.rate *= throttleCut
	case a.phase == starting:
		a.rate *= rateMargin
		a.phase = measuring
		a.holdUntil = now.Add(a.hold())
	case answered < minSamples:
		// Too few answers for an estimate: back below the last one (or
		// slow down), and keep counting from the anchor, where the bucket
		// was empty too.
		a.anchor, a.answered = anchor, answered
		if a.estimate > 0 {
			a.rate = min(a.rate, a.estimate)
		}
		a.rate *= rateMargin
		a.holdUntil = now.Add(a.hold())
	default:
		// Never up on a 429: a rate already below the estimate means the
		// estimate is too high (or the limit fell).
		a.estimate = float64(answered) / now.Sub(anchor).Seconds()
		if low > a.estimate*1.02 {
			// Sent faster than the estimate all along: the bucket never
			// filled, so the count is what it refilled.
			a.rate = rateMargin * min(a.estimate, a.rate)
		} else {
			// Slower for a while: the bucket may have filled and lost
			// refills, and the estimate is only a lower bound. Stay just
			// below where the 429 came; the next 429 is exact.
			a.rate *= rateMargin
		}
		a.phase = steady
		a.holdUntil = now.Add(a.hold())
	}
	a.rate = max(a.rate, minRate)
	if cap > 0 && a.rate > cap {
		a.rate = cap
	}
	if a.anchor == now {
		a.low = a.rate
	}
	a.low = min(a.low, a.rate)
}

// hold is how long the rate holds before probing.
func (a *adaptState) hold() time.Duration {
	return max(probeHold, time.Duration(holdRequests/max(a.rate, minRate)*float64(time.Second)))
}
