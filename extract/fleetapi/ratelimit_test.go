package fleetapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// limitedSim serves a small fleet on the real clock, with the given
// per-token limits, and records when each /api/ request arrived.
type limitedSim struct {
	sim *fleetsim.Sim
	srv *httptest.Server

	mu       sync.Mutex
	arrivals []time.Time
}

func newLimitedSim(t *testing.T, rl fleetsim.RateLimit) *limitedSim {
	t.Helper()
	sim, err := fleetsim.New(fleetsim.Options{Seed: 3, Devices: 2, Variables: 2, Points: 50, Tokens: []string{secret}, RateLimit: rl})
	if err != nil {
		t.Fatal(err)
	}
	ls := &limitedSim{sim: sim}
	ls.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ls.mu.Lock()
		ls.arrivals = append(ls.arrivals, time.Now())
		ls.mu.Unlock()
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ls.srv.Close()
		sim.Close()
	})
	return ls
}

func (ls *limitedSim) requestsSince(t0 time.Time) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	for _, a := range ls.arrivals {
		if !a.Before(t0) {
			n++
		}
	}
	return n
}

func (ls *limitedSim) count(status string) int {
	n := 0
	for k, v := range ls.sim.Counters() {
		if strings.HasSuffix(k, " "+status) {
			n += v
		}
	}
	return n
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestA420StreakPausesEveryRequestAndPastTheBudgetFailsCallsAtOnce(t *testing.T) {
	ls := newLimitedSim(t, fleetsim.RateLimit{})
	c, logs, reg := newTestClient(t, ls.srv.URL, func(cfg *Config) {
		cfg.MaxElapsed, cfg.BackoffMax = 2*time.Second, time.Second
	})
	dev := ls.sim.Devices()[0].ID
	ls.sim.ExhaustAll(time.Hour)
	start := time.Now()
	_, err := c.Device(context.Background(), dev)
	took := time.Since(start)
	if err == nil || !IsAPILimitExceeded(err) || !Retryable(err) || scopedByMethod(err) {
		t.Fatalf("a call during a long 420 streak: %v; want a retryable, unscoped 420", err)
	}
	// The waits after a 420 are a quarter of the 2s budget, not the
	// policy's 5ms start: a handful of requests in the whole budget.
	if n := ls.count("420"); n < 2 || n > 5 || took < 1500*time.Millisecond {
		t.Fatalf("%d requests answered 420 in %s before the call gave up; want 2 to 5 within about the 2s budget", n, took)
	}
	// Past the budget, while the pause lasts, calls fail without sending.
	sent := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Device(context.Background(), dev)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if !IsAPILimitExceeded(err) || !strings.Contains(err.Error(), "not sent") {
			t.Fatalf("a call past the budget: %v; want a 420 not sent", err)
		}
	}
	if n := ls.requestsSince(sent); n != 0 {
		t.Fatalf("%d requests were sent while the exhausted budget's pause lasted", n)
	}
	warned := 0
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "420 API limit exceeded") {
			warned++
		}
	}
	if warned == 0 || warned > ls.count("420") {
		t.Fatalf("%d log lines about the 420s for %d answers; want at least one, at most one per pause", warned, ls.count("420"))
	}
	if n := counterValue(t, reg, "fleetsync_api_rate_limited_total", map[string]string{"code": "420"}); int(n) != ls.count("420") {
		t.Fatalf("fleetsync_api_rate_limited_total{code=420} is %v, fleetsim answered %d", n, ls.count("420"))
	}
	// The budget comes back: after the pause, calls succeed again.
	ls.sim.ExhaustAll(0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Device(context.Background(), dev)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still fail 10s after the budget came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	assertNoSecret(t, err, logs)
}

// heldBack starts a call that meets the answer status, then, once the
// client has seen it and scheduled its retry, a second call, and waits for
// both. It returns the
// arrivals of requests sent after the answer and within hold of the
// first call's start: with every request held back, there are none.
func (ls *limitedSim) heldBack(t *testing.T, c *Client, logs *observer.ObservedLogs, status string, hold time.Duration) []time.Duration {
	t.Helper()
	dev := ls.sim.Devices()[0].ID
	first := time.Now()
	errA := make(chan error, 1)
	go func() {
		_, err := c.Device(context.Background(), dev)
		errA <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	// The second call starts once the client has seen the answer and
	// scheduled its retry (it logs that after setting the pause), not as
	// soon as fleetsim sent it: in between, the client cannot know of the
	// pause, and which of the two came first was the scheduler's choice.
	for ls.count(status) == 0 || logs.FilterMessage("request failed; retrying").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("fleetsim answered no %s, or the client did not retry it, within 5s", status)
		}
		time.Sleep(5 * time.Millisecond)
	}
	second := time.Now()
	if _, err := c.Device(context.Background(), dev); err != nil {
		t.Fatalf("a call started after the %s: %v", status, err)
	}
	if err := <-errA; err != nil {
		t.Fatalf("the call that met the %s: %v", status, err)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var early []time.Duration
	for _, a := range ls.arrivals {
		if a.After(second) && a.Sub(first) < hold {
			early = append(early, a.Sub(first))
		}
	}
	return early
}

func TestA420ShorterThanTheRetryBudgetIsWaitedOutByEveryCallTogether(t *testing.T) {
	ls := newLimitedSim(t, fleetsim.RateLimit{})
	c, logs, _ := newTestClient(t, ls.srv.URL, func(cfg *Config) {
		cfg.MaxElapsed, cfg.BackoffMax = 8*time.Second, time.Second
	})
	ls.sim.ExhaustAll(1500 * time.Millisecond)
	// The 420 pauses every request for 1s (a quarter of the budget, up to
	// BackoffMax): a call started during the pause waits it out.
	if early := ls.heldBack(t, c, logs, "420", 900*time.Millisecond); len(early) > 0 {
		t.Fatalf("requests arrived %v after the first, inside the 1s pause the 420 started", early)
	}
	if n := ls.count("420"); n > 3 {
		t.Fatalf("%d requests answered 420 during a 1.5s exhaustion; want at most 3", n)
	}
}

func TestRetryAfterOfA429HoldsBackEveryRequestWithoutMovingTheRate(t *testing.T) {
	ls := newLimitedSim(t, fleetsim.RateLimit{PerSecond: 0.5, Burst: 1, RetryAfter: true})
	c, logs, reg := newTestClient(t, ls.srv.URL, func(cfg *Config) { cfg.MaxElapsed = 30 * time.Second })
	if r := gaugeValue(t, reg, "fleetsync_api_request_rate"); r != 0 {
		t.Fatalf("fleetsync_api_request_rate is %v before any 429, want 0 (unlimited)", r)
	}
	if _, err := c.Device(context.Background(), ls.sim.Devices()[0].ID); err != nil {
		t.Fatal(err)
	}
	// The next call gets a 429 with Retry-After: 2; a call started after
	// that 429 must not reach the service before those 2s have passed.
	if early := ls.heldBack(t, c, logs, "429", 1900*time.Millisecond); len(early) > 0 {
		t.Fatalf("requests arrived %v after the 429's request, inside its Retry-After: 2", early)
	}
	if r := gaugeValue(t, reg, "fleetsync_api_request_rate"); r != 0 {
		t.Fatalf("fleetsync_api_request_rate is %v after 429s with Retry-After, want 0: the pause paces, the rate stays unlimited", r)
	}
}

func TestA429WithoutRetryAfterSetsTheRateItReports(t *testing.T) {
	ls := newLimitedSim(t, fleetsim.RateLimit{PerSecond: 2, Burst: 2})
	c, _, reg := newTestClient(t, ls.srv.URL, func(cfg *Config) { cfg.MaxElapsed = 30 * time.Second })
	dev := ls.sim.Devices()[0].ID
	for range 4 {
		if _, err := c.Device(context.Background(), dev); err != nil {
			t.Fatal(err)
		}
	}
	if ls.count("429") == 0 {
		t.Fatal("fleetsim answered no 429 to 4 requests at once with a burst of 2")
	}
	if r := gaugeValue(t, reg, "fleetsync_api_request_rate"); r <= 0 || r > 4 {
		t.Fatalf("fleetsync_api_request_rate is %v after a 429 at 2 requests per second, want a learned rate in (0, 4]", r)
	}
}

func TestRequestsPerSecondStaysAHardCap(t *testing.T) {
	ls := newLimitedSim(t, fleetsim.RateLimit{})
	c, _, reg := newTestClient(t, ls.srv.URL, func(cfg *Config) { cfg.RequestsPerSecond = 5 })
	if r := gaugeValue(t, reg, "fleetsync_api_request_rate"); r != 5 {
		t.Fatalf("fleetsync_api_request_rate is %v with a cap of 5 and no 429, want 5", r)
	}
	dev := ls.sim.Devices()[0].ID
	start := time.Now()
	for range 11 {
		if _, err := c.Device(context.Background(), dev); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 1900*time.Millisecond {
		t.Fatalf("11 requests at a cap of 5 per second took %s, want at least 2s", took)
	}
}

func TestRateKeyNamesTheSourceAndAFingerprintOfTheTokenNeverTheToken(t *testing.T) {
	key := func(base, token string) string {
		t.Helper()
		c, err := New(Config{BaseURL: base, Tokens: StaticToken(token)}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		k, err := c.RateKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k := key("https://api.example.com/fleet/", secret)
	if !strings.HasPrefix(k, "api.example.com/fleet#") || len(k) != len("api.example.com/fleet#")+16 {
		t.Errorf("RateKey = %q, want the base URL's host and path, '#', and 16 hex digits", k)
	}
	for i := 0; i+6 <= len(secret); i++ {
		if strings.Contains(k, secret[i:i+6]) {
			t.Fatalf("RateKey %q holds %q, part of the token", k, secret[i:i+6])
		}
	}
	if again := key("https://api.example.com/fleet", secret); again != k {
		t.Errorf("the same source and token give %q and %q", k, again)
	}
	if other := key("https://api.example.com/fleet", secret+"x"); other == k {
		t.Error("two tokens share a rate key")
	}
	if other := key("https://eu.example.com/fleet", secret); other == k {
		t.Error("two sources share a rate key")
	}
}

func TestAClientStartsAtItsStartRateOrFromASeed(t *testing.T) {
	ls := newLimitedSim(t, fleetsim.RateLimit{})
	c, _, reg := newTestClient(t, ls.srv.URL, func(cfg *Config) { cfg.StartRate = HostedRate })
	if r := gaugeValue(t, reg, "fleetsync_api_request_rate"); r != HostedRate {
		t.Fatalf("fleetsync_api_request_rate is %v with a start rate of %v, want it", r, HostedRate)
	}
	if got := c.LearnedRate(); got != (LearnedRate{PerSecond: HostedRate}) {
		t.Fatalf("before any request the client has learned %v, want its start", got)
	}
	learned := LearnedRate{PerSecond: 3.5, Limited: true, Limit: 3.7, At: time.Unix(1e9, 0)}
	c.SeedRate(learned)
	if r := gaugeValue(t, reg, "fleetsync_api_request_rate"); r != 3.5 {
		t.Fatalf("fleetsync_api_request_rate is %v after seeding %v", r, learned)
	}
	// Within the hold of a learned rate, requests go at it.
	dev := ls.sim.Devices()[0].ID
	start := time.Now()
	for range 8 {
		if _, err := c.Device(context.Background(), dev); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 19*time.Second/10 {
		t.Fatalf("8 requests at a seeded 3.5/s took %s, want at least 7 intervals of 1/3.5 s", took)
	}
	if got := c.LearnedRate(); got != learned {
		t.Fatalf("after 8 admitted requests within the hold the client reports %v, want the seed %v", got, learned)
	}
	c.SeedRate(LearnedRate{})
	if r := gaugeValue(t, reg, "fleetsync_api_request_rate"); r != 0 {
		t.Fatalf("fleetsync_api_request_rate is %v seeded unlimited, want 0", r)
	}
}
