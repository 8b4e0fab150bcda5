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
	admittedLate, rejectedLate int // after the first 40 requests' worth
	// firstAdmitted is when the first N requests had been admitted
	// (bucketSim.firstN), from the start; 0 if they were not.
	firstAdmitted time.Duration
	// firstRejected counts the 429s before that.
	firstRejected int
	finalRate     float64
	learned       LearnedRate
}

// bucketSim runs a limiter against a token bucket of rate r and burst b
// (r = 0: no limit) on a simulated clock: workers send back to back (a 429
// is retried after 250ms), each request arrives when the limiter lets it
// go and is answered lat later.
type bucketSim struct {
	r       float64
	b       int
	workers int
	lat     time.Duration
	// seed, when set, seeds the limiter; otherwise it starts cautiously
	// at HostedRate.
	seed *LearnedRate
	// firstN is the size of a short sync to time within the run.
	firstN int
	// stopAtN ends the run when firstN requests were admitted.
	stopAtN bool
}

func (s bucketSim) run(span time.Duration) bucketRun {
	start := time.Unix(1000, 0)
	now := start
	l := newLimiter(0, HostedRate, func() time.Time { return now }, nil)
	if s.seed != nil {
		l.Seed(*s.seed)
	}
	type event struct {
		at     time.Time
		kind   int // 0 ready, 1 arrive, 2 respond
		status int
		booked uint64
	}
	var q []event
	for range s.workers {
		q = append(q, event{at: start})
	}
	level, filled := float64(s.b), start
	settle := time.Duration(0)
	if s.r > 0 {
		settle = time.Duration(40 / s.r * float64(time.Second))
	}
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
			at, booked := l.reserve()
			q = append(q, event{at: at, kind: 1, booked: booked})
		case 1:
			if l.cutSince(e.booked) {
				at, booked := l.reserve()
				q = append(q, event{at: at, kind: 1, booked: booked})
				continue
			}
			st := http.StatusOK
			if s.r > 0 {
				level = min(float64(s.b), level+now.Sub(filled).Seconds()*s.r)
				filled = now
				if level < 1 {
					st = http.StatusTooManyRequests
				} else {
					level--
				}
			}
			late := now.Sub(start) >= settle
			switch {
			case st == http.StatusOK:
				out.admitted++
				if late {
					out.admittedLate++
				}
				if out.admitted == s.firstN {
					out.firstAdmitted = now.Add(s.lat).Sub(start)
					if s.stopAtN {
						q = nil
						continue
					}
				}
			default:
				out.rejected++
				if late {
					out.rejectedLate++
				}
				if out.admitted < s.firstN {
					out.firstRejected++
				}
			}
			q = append(q, event{at: now.Add(s.lat), kind: 2, status: st})
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
	out.learned = l.Learned()
	return out
}

// unlimitedStart seeds a limiter to start unlimited, as a Client without
// a StartRate does.
var unlimitedStart = &LearnedRate{}

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
		for _, start := range []struct {
			name string
			seed *LearnedRate
		}{{"cautious", nil}, {"unlimited", unlimitedStart}} {
			t.Run(fmt.Sprintf("%s R=%v B=%d workers=%d latency=%s", start.name, c.rate, c.burst, c.workers, c.lat), func(t *testing.T) {
				// A first sync of 240 requests' worth.
				span := time.Duration(240 / c.rate * float64(time.Second))
				out := bucketSim{r: c.rate, b: c.burst, workers: c.workers, lat: c.lat, seed: start.seed}.run(span)
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
}

// The figures (26, "a learned rate outlives the process"): against
// 4 requests per second, a short first sync lost 11 of its 64 requests to
// 429s when the client started unlimited.
func TestACautiousStartFindsTheLimitLosingAtMostFivePercentOfAFirstSync(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int
		n     int
		// used is the least share of the limit the first n requests use.
		used float64
	}{
		{4, 4, 64, 0.90},
		{4, 4, 180, 0.90},
		{4, 1, 180, 0.85},
		{4, 2, 64, 0.90},
		{4, 8, 180, 0.90},
		{6, 6, 180, 0.90},
		{10, 10, 240, 0.90},
		// From 4 to 20 takes a few seconds: over 24 s, 85 %.
		{20, 20, 480, 0.85},
	} {
		t.Run(fmt.Sprintf("R=%v B=%d %d requests", c.rate, c.burst, c.n), func(t *testing.T) {
			sim := bucketSim{r: c.rate, b: c.burst, workers: 4, lat: 50 * time.Millisecond, firstN: c.n}
			out := sim.run(3 * time.Duration(float64(c.n)/c.rate*float64(time.Second)))
			if out.firstAdmitted == 0 {
				t.Fatalf("%d requests were not admitted within three times what the limit needs", c.n)
			}
			// The burst is free; the rest comes at the limit.
			ideal := float64(c.n-c.burst) / c.rate
			used := ideal / out.firstAdmitted.Seconds()
			share := float64(out.firstRejected) / float64(c.n+out.firstRejected)
			t.Logf("%d requests admitted in %.1f s (%.0f%% of the limit) with %d answered 429 (%.1f%%); learned %v",
				c.n, out.firstAdmitted.Seconds(), 100*used, out.firstRejected, 100*share, out.learned)
			if share > 0.05 {
				t.Errorf("%d of %d requests were answered 429 (%.1f%%), want at most 5%%", out.firstRejected, c.n+out.firstRejected, 100*share)
			}
			if used < c.used {
				t.Errorf("the requests used %.0f%% of the limit, want at least %.0f%%", 100*used, 100*c.used)
			}
			if l := out.learned; !l.Limited || l.PerSecond < 0.85*c.rate || l.PerSecond > c.rate {
				t.Errorf("learned %v against a limit of %v/s; want a rate from 429s within 85–100 %% of it", l, c.rate)
			}
		})
	}
}

func TestAClientSeededWithALearnedRateIsNotThrottled(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int
	}{{4, 4}, {4, 1}, {4, 20}, {2, 2}, {20, 20}} {
		t.Run(fmt.Sprintf("R=%v B=%d", c.rate, c.burst), func(t *testing.T) {
			// Long enough for the learned rate's hold and a probe or two.
			n := int(120 * c.rate)
			sim := bucketSim{r: c.rate, b: c.burst, workers: 4, lat: 50 * time.Millisecond, firstN: n}
			span := 2 * time.Duration(float64(n)/c.rate*float64(time.Second))
			first := sim.run(span)
			learned := first.learned
			sim.seed = &learned
			second := sim.run(span)
			// Within the hold (80 requests, 20 s at least) nothing is
			// throttled; after it, a probe costs a 429 or two.
			sim.firstN = 80
			early := sim.run(span)
			t.Logf("first run: %d of %d throttled, learned %v; seeded: %d throttled, %d in its first 80 requests",
				first.firstRejected, n, learned, second.firstRejected, early.firstRejected)
			if early.firstRejected != 0 {
				t.Errorf("a run seeded with %v had %d of its first 80 requests throttled, want none", learned, early.firstRejected)
			}
			if share := float64(second.firstRejected) / float64(n); share > 0.02 {
				t.Errorf("a run seeded with %v had %d of %d requests throttled (%.1f%%), want at most 2%%", learned, second.firstRejected, n, 100*share)
			}
			if first.firstRejected <= second.firstRejected {
				t.Errorf("the first run had %d requests throttled and the seeded one %d: the seed taught nothing", first.firstRejected, second.firstRejected)
			}
		})
	}
}

func TestACautiousStartOnAServiceWithoutALimitEndsUnlimitedWithinSeconds(t *testing.T) {
	for _, c := range []struct {
		n   int
		lat time.Duration
	}{{50, time.Millisecond}, {200, time.Millisecond}, {5000, time.Millisecond}, {200, 50 * time.Millisecond}, {1000, 50 * time.Millisecond}} {
		t.Run(fmt.Sprintf("%d requests latency=%s", c.n, c.lat), func(t *testing.T) {
			sim := bucketSim{workers: 4, lat: c.lat, firstN: c.n, stopAtN: true}
			cautious := sim.run(time.Hour)
			sim.seed = unlimitedStart
			free := sim.run(time.Hour)
			cost := cautious.firstAdmitted - free.firstAdmitted
			t.Logf("%d requests: %.2f s starting cautiously, %.2f s unlimited: %.2f s more; learned %v",
				c.n, cautious.firstAdmitted.Seconds(), free.firstAdmitted.Seconds(), cost.Seconds(), cautious.learned)
			// 4 requests/s growing to 256/s: about 5.7 s at most.
			if cost > 6*time.Second {
				t.Errorf("starting cautiously cost %s, want at most 6 s", cost)
			}
			if l := cautious.learned; l.Limited || l.PerSecond != 0 && l.PerSecond < 2*HostedRate {
				t.Errorf("learned %v without a 429; want a rate still growing, past twice the start, or unlimited", l)
			}
			if c.n >= 200 && cautious.learned != (LearnedRate{}) {
				t.Errorf("after %d requests without a 429 the client learned %v, want unlimited", c.n, cautious.learned)
			}
			// The next run starts where this one got to.
			sim.seed = &cautious.learned
			again := sim.run(time.Hour)
			if cautious.learned == (LearnedRate{}) {
				if again.firstAdmitted != free.firstAdmitted {
					t.Errorf("seeded with %v the same requests took %s, unlimited %s", cautious.learned, again.firstAdmitted, free.firstAdmitted)
				}
			} else if again.firstAdmitted > cautious.firstAdmitted/2 {
				t.Errorf("seeded with %v the same requests took %s, the cautious start %s: the seed was not used", cautious.learned, again.firstAdmitted, cautious.firstAdmitted)
			}
		})
	}
}

func TestIdleTimeBetweenCyclesDoesNotRaiseTheRate(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(0, 0, func() time.Time { return now }, nil)
	l.Seed(LearnedRate{PerSecond: 3.88, Limited: true, Limit: 4})
	cycle := func(n int) {
		for range n {
			at, _ := l.reserve()
			now = at.Add(50 * time.Millisecond)
			l.Observe(http.StatusOK, time.Time{})
		}
	}
	cycle(200) // past the hold: the rate probes upward a little
	before := l.Rate()
	now = now.Add(5 * time.Minute)
	cycle(1)
	if after := l.Rate(); after > before*1.01 {
		t.Fatalf("the rate went from %.2f to %.2f on the first answer after 5 idle minutes; idle time is not time admitted", before, after)
	}
	// After the gap the bucket has filled, so the rate holds again.
	cycle(20)
	if r := l.Rate(); r > before*1.01 {
		t.Fatalf("the rate went from %.2f to %.2f within the hold after an idle gap", before, r)
	}
}

func TestSlotsBookedBeforeA429LoweredTheRateAreBookedAgain(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(0, 0, func() time.Time { return now }, nil)
	l.Seed(LearnedRate{PerSecond: 100})
	var booked []uint64
	for range 5 {
		_, b := l.reserve()
		booked = append(booked, b)
	}
	l.Observe(http.StatusTooManyRequests, time.Time{})
	if l.Rate() >= 100 {
		t.Fatalf("a 429 left the rate at %.1f", l.Rate())
	}
	for i, b := range booked {
		if !l.cutSince(b) {
			t.Errorf("slot %d, booked at 100/s before the 429, still goes", i+1)
		}
	}
	at, b := l.reserve()
	if want := now.Add(time.Duration(float64(time.Second) / l.Rate())); !at.Equal(want) {
		t.Errorf("the first slot after the 429 is %s from now, want one interval at the new rate, %s", at.Sub(now), want.Sub(now))
	}
	if l.cutSince(b) {
		t.Error("a slot booked after the 429 is booked again")
	}
}

func TestLearnedRateRoundTrips(t *testing.T) {
	at := time.Unix(5000, 0)
	for _, r := range []LearnedRate{
		{},
		{PerSecond: 9.5},
		{PerSecond: 3.88, Limited: true, Limit: 4, At: at},
		{PerSecond: 2, Limited: true, At: at},
	} {
		l := newLimiter(0, HostedRate, time.Now, nil)
		l.Seed(r)
		if got := l.Learned(); got != r {
			t.Errorf("seeded with %+v, the limiter reports %+v", r, got)
		}
	}
	// A learned rate probed past the estimate is kept below it.
	l := newLimiter(0, 0, time.Now, nil)
	l.Seed(LearnedRate{PerSecond: 4.2, Limited: true, Limit: 4, At: at})
	if got := l.Learned(); got.PerSecond != rateMargin*4 {
		t.Errorf("a rate of 4.2/s over an estimate of 4/s is kept as %.3f, want %.3f", got.PerSecond, rateMargin*4)
	}
}

func TestARateKeptFromAShortRunDoesNotThrottleTheNext(t *testing.T) {
	// A CronJob's run may end before its 429s gave an estimate; what it
	// keeps must not start the next run above the limit.
	total := 0
	for _, n := range []int{15, 20, 25, 30, 35, 40, 44, 50, 60} {
		for _, b := range []int{1, 2, 4, 8} {
			for _, lat := range []time.Duration{5 * time.Millisecond, 50 * time.Millisecond} {
				sim := bucketSim{r: 4, b: b, workers: 4, lat: lat, firstN: n, stopAtN: true}
				first := sim.run(time.Hour)
				if first.firstRejected == 0 {
					continue // nothing learned: the next run is a first one again
				}
				learned := first.learned
				next := bucketSim{r: 4, b: b, workers: 4, lat: lat, firstN: 60, stopAtN: true, seed: &learned}.run(time.Hour)
				total += next.firstRejected
				if next.firstRejected > 2 {
					t.Errorf("%d requests (burst %d, latency %s) kept %v; the next 60 had %d throttled, want at most 2",
						n, b, lat, learned, next.firstRejected)
				}
			}
		}
	}
	t.Logf("429s in the next runs, all cases together: %d", total)
}
