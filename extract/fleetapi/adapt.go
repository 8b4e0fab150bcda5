package fleetapi

import (
	"math"
	"time"
)

// How the Client learns the service's request limit without being told it.
//
// The service limits each token with what behaves like a token bucket: a
// rate R and a burst B it does not document.
//
// A Client with nothing learned starts cautiously, at Config.StartRate
// (fleetsync gives HostedRate, what the hosted service documents per
// token), and multiplies it while the service admits what it sends, slowly
// near the start and faster the further it got (cautiousGrowth), so that a
// plan with a higher limit, or none, is found within seconds: past openRate
// the client is unlimited (below the configured cap). A Client seeded with
// what an earlier one learned (LearnedRate, kept in the state store across
// runs) starts from that instead: at a rate 429s taught, held and then
// probed upward slowly, or where an earlier cautious start got to without
// a 429, growing on from there. Without either it starts unlimited.
//
// A 429 says the bucket is empty at that instant. Between two instants at
// which it is empty, the service admitted what it refilled, R per second,
// give or take one request, and less when the client sent slower than R
// long enough for the bucket to fill and overflow. So the requests answered
// between two 429s, divided by the time between them, estimate R: exactly
// when the client sent faster than R all along, from below otherwise.
//
// The first 429 of a cautious start comes once the rate has passed R for
// long enough to drain the burst. The rate goes back to where it was
// fallbackLag before, which is near R when the burst is about a second's
// worth (but not above half the rate, nor above what got through since the
// start if that is more: a limit below the start). A client that started
// unlimited (seeded so) sets the rate at its first 429 to what got through
// in the last second (the burst included), growing by a quarter per
// second, and at the next 429, above the limit once the burst is spent,
// goes a margin below where it was. Either way the rate then holds for the
// answers of an estimate (measureHold) and grows by a quarter per second
// if no 429 came; the next 429 gives an estimate (or, with too few answers,
// cuts the rate to what got through since the last one). From then on each
// 429 sets the rate a margin below the estimate between it and the
// previous one; the rate holds (at least 20 s and 80 requests) and then
// probes upward by a percent per second, to find a limit that was raised.
// A probe costs one 429; at 4 requests per second that is under 1 % of the
// requests. When a 429 lowers the rate, the slots booked at the old rate
// are booked again at the new one (see limiter.Wait), so that the requests
// waiting for them do not all meet the empty bucket too.
//
// Only 429s without a Retry-After teach the rate (see limiter.Observe).
// Other 429s within a second (or two requests) of one acted upon are the
// echo of the same overshoot and change nothing. After an idle gap (a
// pause, the time between two daemon cycles) the bucket has filled again,
// so the count starts over at the next 429 and a learned rate holds again
// before it probes (the burst would hide an overshoot); the rate learned
// stays, and the gap does not count as time the rate was admitted.
const (
	// cautiousGrowth is the growth per second of a cautious start at its
	// floor; it grows with the rate (see adaptState.cautiousGrowth).
	cautiousGrowth = 0.3
	// openRate is the rate past which a cautious start ends unlimited.
	openRate = 256.0
	// fallbackLag is how far back a cautious start goes at its first 429:
	// to the rate it had this long before.
	fallbackLag = 2 * time.Second
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
	// unlimited: no 429 seen yet, and no rate in force.
	unlimited phase = iota
	// cautious: no 429 seen yet; the rate grows from where it started
	// (floor) while the service admits it.
	cautious
	// starting: one 429 seen while unlimited; the rate grows fast from
	// what got through.
	starting
	// measuring: the rate sits a margin below where a 429 came while
	// growing, or where a cautious start was a little before its first
	// 429, near the limit; it holds, then grows, until the next 429
	// gives an estimate.
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
	// floor is where a cautious start began.
	floor float64
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
	// learnedAt is when a 429 last set the rate, in this Client or the
	// one whose rate seeded it; zero when none did.
	learnedAt time.Time
	// cutTo is the rate the last 429 acted upon in this Client set; 0
	// when none did.
	cutTo float64
}

// start begins a cautious start at rate.
func (a *adaptState) start(rate float64) {
	a.phase, a.rate, a.floor = cautious, rate, rate
}

// seed starts from what an earlier Client learned (see LearnedRate).
func (a *adaptState) seed(r LearnedRate) {
	switch {
	case r.Limited && r.PerSecond > 0:
		a.phase, a.rate, a.estimate = steady, max(r.PerSecond, minRate), max(r.Limit, 0)
	case r.PerSecond > 0:
		a.start(max(r.PerSecond, minRate))
	default:
		a.phase, a.rate = unlimited, 0
	}
	a.learnedAt, a.cutTo = r.At, 0
	// The next request starts a busy period, which holds a learned rate.
	a.last, a.holdUntil = time.Time{}, time.Time{}
}

// learned is what to start the next Client from.
func (a *adaptState) learned() LearnedRate {
	switch a.phase {
	case unlimited:
		return LearnedRate{}
	case cautious:
		return LearnedRate{PerSecond: a.rate}
	}
	r := LearnedRate{PerSecond: a.rate, Limited: true, Limit: a.estimate, At: a.learnedAt}
	switch {
	case a.estimate > 0:
		// A probe may have taken the rate past the limit; the next Client
		// starts below it.
		r.PerSecond = min(r.PerSecond, rateMargin*a.estimate)
	case a.cutTo > 0:
		// 429s came but no estimate yet (a short run): where the last one
		// set the rate may still be above the limit, and growth since
		// unproven; the next Client starts a cut below it.
		r.PerSecond = max(throttleCut*min(r.PerSecond, a.cutTo), minRate)
	}
	return r
}

// sending notes a request about to be scheduled at now.
func (a *adaptState) sending(now time.Time) {
	if a.last.IsZero() || now.Sub(a.last) > idleGap {
		a.busySince, a.busyAnswered = now, 0
		a.anchor, a.answered = time.Time{}, 0
		// Idle time is not time the rate was admitted, and the bucket has
		// filled meanwhile: a burst would hide an overshoot.
		if !a.grown.IsZero() {
			a.grown = now
		}
		if a.phase == measuring || a.phase == steady {
			a.holdUntil = later(a.holdUntil, now.Add(a.hold()))
		}
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
	switch a.phase {
	case cautious:
		g = a.cautiousGrowth()
	case starting:
		g = startGrowth
	case measuring:
		if a.estimate == 0 {
			g = startGrowth
		}
	}
	a.rate *= 1 + g*now.Sub(a.grown).Seconds()
	a.grown = now
	if a.phase == cautious && a.rate >= openRate && (cap == 0 || cap >= openRate) {
		// No limit worth keeping to (the cap still holds).
		a.phase, a.rate = unlimited, 0
		return
	}
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
	a.acted, a.grown, a.learnedAt = now, now, now
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
	case a.phase == cautious:
		// The burst is spent: back to where the rate was a little before,
		// near the limit, but not above half the rate now, nor above what
		// got through since the start (burst included) if more than that.
		span := max(now.Sub(a.busySince).Seconds(), 1)
		got := float64(a.busyAnswered) / span
		a.rate = min(a.fallback(), max(got, a.rate/2))
		a.phase = measuring
		a.holdUntil = now.Add(a.measureHold())
	case anchor.IsZero():
		// The first 429 after an idle gap: the limit may have changed.
		a.rate *= throttleCut
	case a.phase == starting:
		a.rate *= rateMargin
		a.phase = measuring
		a.holdUntil = now.Add(a.measureHold())
	case answered < minSamples && a.estimate > 0:
		// Too few answers for an estimate: back below the last one, and
		// keep counting from the anchor, where the bucket was empty too.
		a.anchor, a.answered = anchor, answered
		a.rate = rateMargin * min(a.rate, a.estimate)
		a.holdUntil = now.Add(a.hold())
	case answered < minSamples:
		// Too few answers for an estimate, and none before: slow down, to
		// what got through since the anchor if that is less (exact to a
		// request), and keep counting from the anchor.
		a.anchor, a.answered = anchor, answered
		a.rate *= throttleCut
		if answered >= 3 {
			a.rate = min(a.rate, float64(answered)/now.Sub(anchor).Seconds())
		}
		a.holdUntil = now.Add(a.measureHold())
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
	a.cutTo = a.rate
}

// cautiousGrowth is the growth per second of a cautious start at the
// current rate: slow near where it started, where the limit most likely is,
// so that the rate is not far past the limit when the burst is spent, and
// faster the further it got without a 429. With u = ln(rate/floor),
// du/dt = cautiousGrowth (1+u): u = e^(cautiousGrowth t) - 1.
func (a *adaptState) cautiousGrowth() float64 {
	return cautiousGrowth * (1 + math.Log(max(a.rate/a.floor, 1)))
}

// fallback is the rate of the cautious start fallbackLag ago (the floor at
// the least), by the law of cautiousGrowth; idle time and holds only make
// the true rate then higher.
func (a *adaptState) fallback() float64 {
	u := math.Log(max(a.rate/a.floor, 1))
	back := (1+u)*math.Exp(-cautiousGrowth*fallbackLag.Seconds()) - 1
	return a.floor * math.Exp(max(back, 0))
}

// measureHold is how long the rate holds before growing while no estimate
// was made: long enough for the answers of one.
func (a *adaptState) measureHold() time.Duration {
	return max(rejectHoldoff, time.Duration(minSamples/max(a.rate, minRate)*float64(time.Second)))
}

// hold is how long the rate holds before probing.
func (a *adaptState) hold() time.Duration {
	return max(probeHold, time.Duration(holdRequests/max(a.rate, minRate)*float64(time.Second)))
}

// later is the later of two instants.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
