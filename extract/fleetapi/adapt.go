package fleetapi

import "time"

// How the Client learns the service's request limit without being told it.
//
// The service limits each token with what behaves like a token bucket: a
// rate R and a burst B it does not document. The client starts unlimited
// (below the configured cap), so a service without a limit costs nothing.
//
// A 429 says the bucket is empty at that instant. Between two instants at
// which it is empty, the service admitted what it refilled, R per second,
// give or take one request, and less when the client sent slower than R
// long enough for the bucket to fill and overflow. So the requests answered
// between two 429s, divided by the time between them, estimate R: exactly
// when the client sent faster than R all along, from below otherwise.
//
// The first 429 starts the rate at what got through in the last second
// (the burst included), growing by a quarter per second. The next 429 comes
// above the limit once the burst is spent; the rate goes a margin below
// where it was, which still sends faster than R unless the burst hid a lot,
// so the 429 after gives an exact estimate. From then on each 429 sets the
// rate a margin below the estimate between it and the previous one; the
// rate holds (at least 20 s and 80 requests) and then probes upward by a
// percent per second, to find a limit that was raised. A probe costs one
// 429; at 4 requests per second that is under 1 % of the requests.
//
// Only 429s without a Retry-After teach the rate (see limiter.Observe).
// Other 429s within a second (or two requests) of one acted upon are the
// echo of the same overshoot and change nothing. After an idle gap (a
// pause, the time between two daemon cycles) the bucket has filled again,
// so the count starts over at the next 429; the rate learned stays.
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
	anchor, answered := a.anchor, a.answered
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
			a.rate = rateMargin * min(a.rate, a.estimate)
		} else {
			a.rate *= throttleCut
		}
		a.holdUntil = now.Add(a.hold())
	default:
		// Never up on a 429: a rate already below the estimate means the
		// estimate is too high (or the limit fell).
		a.estimate = float64(answered) / now.Sub(anchor).Seconds()
		a.rate = rateMargin * min(a.estimate, a.rate)
		a.phase = steady
		a.holdUntil = now.Add(a.hold())
	}
	a.rate = max(a.rate, minRate)
	if cap > 0 && a.rate > cap {
		a.rate = cap
	}
}

// hold is how long the rate holds before probing.
func (a *adaptState) hold() time.Duration {
	return max(probeHold, time.Duration(holdRequests/max(a.rate, minRate)*float64(time.Second)))
}
