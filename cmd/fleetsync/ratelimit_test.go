package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// rateTotals sums fleetsim's per-second counts of its per-token limits from
// the second from on.
func rateTotals(stats []fleetsim.RateSecond, from int64) (admitted, limited, exhausted int) {
	for _, s := range stats {
		if s.Unix >= from {
			admitted, limited, exhausted = admitted+s.Admitted, limited+s.Limited, exhausted+s.Exhausted
		}
	}
	return
}

func TestFirstSyncUnderAPerTokenLimitUsesNinetyPercentOfItAndIsRarelyRejected(t *testing.T) {
	const limit = 4.0
	// 44 devices × 4 variables, one variable per raw-series request: about
	// 180 requests, 45 s at 4 per second.
	w := newFaultWorld(t, faultOpts{
		sim:  fleetsim.Options{Seed: 5, Devices: 44, Variables: 4, Points: 40, Span: 2 * 24 * time.Hour, RateLimit: fleetsim.RateLimit{PerSecond: limit}},
		sync: "variables_per_request: 1",
	})
	start := time.Now()
	_, logs := w.sync()
	took := time.Since(start)
	w.checkOracle()

	stats := w.sim.RateStats()
	if len(stats) == 0 {
		t.Fatal("fleetsim counted no request of the token")
	}
	first, last := stats[0].Unix, stats[len(stats)-1].Unix
	admitted, limited, _ := rateTotals(stats, first)
	// The seconds are whole: the span counted is at least the real one,
	// so the rate is, if anything, understated.
	span := float64(last - first + 1)
	rate := float64(admitted) / span
	lateAdmitted, lateLimited, _ := rateTotals(stats, first+10)
	lateShare := float64(lateLimited) / float64(lateAdmitted+lateLimited)
	t.Logf("first sync in %s: %d requests answered and %d throttled over %.0f s (%.2f/s, %.0f%% of the limit); after the first 10 s %d of %d throttled (%.1f%%)",
		took.Round(time.Millisecond), admitted, limited, span, rate, 100*rate/limit, lateLimited, lateAdmitted+lateLimited, 100*lateShare)
	var throttled []string
	for _, s := range stats {
		if s.Limited > 0 {
			throttled = append(throttled, fmt.Sprintf("+%ds: %d", s.Unix-first, s.Limited))
		}
	}
	t.Logf("429s by second since the first request: %s", strings.Join(throttled, ", "))
	if span < 30 {
		t.Fatalf("the sync's requests took %.0f s; the fleet must need at least 30 s at %v per second", span, limit)
	}
	if rate < 0.9*limit {
		t.Errorf("achieved %.2f requests per second, want at least 90%% of the limit %v", rate, limit)
	}
	if lateShare >= 0.02 {
		t.Errorf("%.1f%% of the requests after the first 10 s were throttled, want under 2%%", 100*lateShare)
	}
	if strings.Contains(logs, testToken) {
		t.Fatal("the token appears in the logs")
	}
}

func TestA420PastTheRetryBudgetFailsTheCycleKeepingProgressAndALaterCycleIsExact(t *testing.T) {
	// The token's budget runs out after 30 requests, for an hour: the
	// cycle must give up within its retry budget, not wait the hour.
	w := newFaultWorld(t, faultOpts{
		sim:    fleetsim.Options{Seed: 6, Devices: 12, Variables: 4, Points: 60, Span: 2 * 24 * time.Hour, RateLimit: fleetsim.RateLimit{Quota: 30, ExhaustedFor: time.Hour}},
		source: "retry_max_elapsed: 4s",
		sync:   "variables_per_request: 1",
	})
	start := time.Now()
	code, _, logs := w.cli(context.Background(), "sync", "--config", w.cfgPath)
	took := time.Since(start)
	if code != 1 {
		t.Fatalf("exit %d with the token's budget used up for an hour, want 1; log:\n%s", code, lastLines(logs, 10))
	}
	if took > 60*time.Second {
		t.Fatalf("the cycle took %s with a retry budget of 4s", took)
	}
	_, _, n420 := rateTotals(w.sim.RateStats(), 0)
	if pauses := logLines(t, logs, "the service answered 420 API limit exceeded: the token's request budget is used up; pausing every request"); len(pauses) == 0 || len(pauses) > n420 {
		t.Fatalf("%d log lines about the 420 pause for %d 420 answers; want at least one, at most one per answer", len(pauses), n420)
	}
	last := lastLines(logs, 1)
	if !strings.Contains(last, "420") || !strings.Contains(last, "budget") {
		t.Fatalf("the final error does not say the token's budget is used up (420): %s", last)
	}
	// Progress kept: marks cover what was loaded, nothing else landed.
	marks := w.checkMarksCovered(map[string]int64{})
	want, got := w.expected(), w.loaded()
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Fatalf("a row that is not in the source was loaded: %v", k)
		}
	}
	if len(marks) == 0 || len(got) == 0 || len(got) >= len(want) {
		t.Fatalf("after the 420s: %d marks, %d of %d points loaded; want some progress kept, not all", len(marks), len(got), len(want))
	}
	t.Logf("exit 1 after %s with %d×420; %d variables marked, %d of %d points loaded", took.Round(time.Millisecond), n420, len(marks), len(got), len(want))

	// The budget comes back: the next cycle finishes the job, exactly.
	if err := w.sim.SetRateLimit(fleetsim.RateLimit{}); err != nil {
		t.Fatal(err)
	}
	w.sync()
	w.checkMarksCovered(marks)
	w.checkOracle()
}

func TestA420ShorterThanTheRetryBudgetIsWaitedOutAndTheCycleIsExact(t *testing.T) {
	// Every 40 requests the budget is gone for 2s; a 12s retry budget
	// waits 3s pauses, every request together.
	w := newFaultWorld(t, faultOpts{
		sim:    fleetsim.Options{Seed: 8, Devices: 12, Variables: 4, Points: 60, Span: 2 * 24 * time.Hour, RateLimit: fleetsim.RateLimit{Quota: 40, ExhaustedFor: 2 * time.Second}},
		source: "retry_max_elapsed: 12s",
		sync:   "variables_per_request: 1",
	})
	_, logs := w.sync()
	w.checkOracle()
	admitted, _, n420 := rateTotals(w.sim.RateStats(), 0)
	episodes := (admitted + 39) / 40
	if n420 == 0 {
		t.Fatal("fleetsim answered no 420; make the fleet bigger")
	}
	// Each exhaustion meets the requests in flight (up to max_in_flight,
	// 4) and then one shared pause, not a retry every few milliseconds.
	if n420 > 4*episodes+2 {
		t.Fatalf("%d requests answered 420 over %d exhaustions; want at most %d", n420, episodes, 4*episodes+2)
	}
	if len(logLines(t, logs, "the service answered 420 API limit exceeded: the token's request budget is used up; pausing every request")) == 0 {
		t.Fatal("no log line says the token's budget is used up")
	}
	t.Logf("%d requests answered, %d×420 over %d exhaustions", admitted, n420, episodes)
}

func TestAnIncrementalCycleOverTenThousandVariablesAtFourRequestsPerSecondTakesUnderFifteenSeconds(t *testing.T) {
	// The first sync runs unlimited; then the service takes on the hosted
	// one's limit and a WAN's latency, and 1 % of the variables change.
	w := newFaultWorld(t, faultOpts{
		sim: fleetsim.Options{Seed: 9, Devices: 2500, Variables: 4, Points: 20, Span: 24 * time.Hour},
	})
	w.sync()
	if err := w.sim.SetRateLimit(fleetsim.RateLimit{PerSecond: 4}); err != nil {
		t.Fatal(err)
	}
	w.sim.SetFaults(fleetsim.Faults{Latency: 50 * time.Millisecond})
	var ids []string
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			ids = append(ids, v.ID)
		}
	}
	now := time.Now().UnixMilli()
	for k := range len(ids) / 100 {
		pts := []fleetsim.SimPoint{{TimestampMs: now - 3000, Value: 1}, {TimestampMs: now - 2000, Value: 2}, {TimestampMs: now - 1000, Value: 3}}
		if err := w.sim.AddPoints(ids[k*100+7], pts); err != nil {
			t.Fatal(err)
		}
	}
	w.sim.ResetCounters()
	start := time.Now()
	_, logs := w.sync()
	took := time.Since(start)
	w.checkOracle()
	requests, throttled := 0, 0
	for k, n := range w.sim.Counters() {
		if strings.Contains(k, "/api/") && !strings.HasPrefix(k, "cut ") {
			requests += n
			if strings.HasSuffix(k, " 429") {
				throttled += n
			}
		}
	}
	summary := cycleSummary(t, logs)
	t.Logf("1%% changed over %d variables at 4 requests/s and 50 ms: %s, %d requests (%d throttled), %v raw-series requests, %v points",
		len(ids), took.Round(time.Millisecond), requests, throttled, summary["requests"], summary["points"])
	// At 4 requests per second, 15 s is 60 requests: the count fleetsim
	// kept is the measure the machine's load cannot blur.
	if requests > 60 {
		t.Errorf("the cycle made %d requests, more than the 60 that 15 s at 4 per second allow: %v", requests, w.sim.Counters())
	}
	if took > 15*time.Second {
		t.Errorf("the cycle took %s, want under 15 s", took)
	}
}
