package fleetsim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestPerTokenBucketAnswers429WithoutRetryAfterOnceTheBurstIsSpent(t *testing.T) {
	e := newEnv(t, Options{Tokens: []string{testToken, "other"}, RateLimit: RateLimit{PerSecond: 4, Burst: 3}})
	var got []int
	for range 5 {
		got = append(got, e.get("/api/v2.0/devices/").status)
	}
	want := []int{200, 200, 200, 429, 429}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses of 5 requests at once with burst 3: %v, want %v", got, want)
		}
	}
	r := e.get("/api/v2.0/devices/")
	if r.status != 429 || r.header.Get("Retry-After") != "" {
		t.Fatalf("a throttled request: status %d, Retry-After %q; want 429 without Retry-After", r.status, r.header.Get("Retry-After"))
	}
	// Another token has its own bucket; a wrong token gets its 401.
	if r := e.do("GET", "/api/v2.0/devices/", nil, "other"); r.status != 200 {
		t.Fatalf("another token's first request: status %d, want 200", r.status)
	}
	if r := e.do("GET", "/api/v2.0/devices/", nil, "wrong"); r.status != 401 {
		t.Fatalf("a wrong token: status %d, want 401", r.status)
	}
	// The bucket refills at 4 per second: one request per 250ms.
	e.clock.Advance(250 * time.Millisecond)
	if a, b := e.get("/api/v2.0/devices/").status, e.get("/api/v2.0/devices/").status; a != 200 || b != 429 {
		t.Fatalf("250ms later: %d then %d, want 200 then 429", a, b)
	}
	var adm, lim int
	for _, s := range e.sim.RateStats() {
		adm += s.Admitted
		lim += s.Limited
	}
	if adm != 5 || lim != 4 {
		t.Fatalf("rate stats count %d admitted and %d limited, want 5 and 4: %+v", adm, lim, e.sim.RateStats())
	}
}

func TestRateLimitRetryAfterNamesTheSecondsUntilTheBucketRefills(t *testing.T) {
	e := newEnv(t, Options{RateLimit: RateLimit{PerSecond: 0.5, Burst: 1, RetryAfter: true}})
	if r := e.get("/api/v2.0/devices/"); r.status != 200 {
		t.Fatalf("first request: %d", r.status)
	}
	r := e.get("/api/v2.0/devices/")
	if r.status != 429 || r.header.Get("Retry-After") != "2" {
		t.Fatalf("at 0.5/s: status %d Retry-After %q, want 429 and 2", r.status, r.header.Get("Retry-After"))
	}
}

func TestQuotaExhaustionAnswers420ForItsDurationThenStartsOver(t *testing.T) {
	e := newEnv(t, Options{RateLimit: RateLimit{Quota: 3, ExhaustedFor: 10 * time.Second}})
	for i := range 3 {
		if r := e.get("/api/v2.0/devices/"); r.status != 200 {
			t.Fatalf("request %d within the quota: %d", i+1, r.status)
		}
	}
	r := e.get("/api/v1.6/variables/x/values")
	if r.status != StatusAPILimitExceeded {
		t.Fatalf("past the quota: status %d, want 420", r.status)
	}
	e.clock.Advance(9 * time.Second)
	if r := e.get("/api/v2.0/devices/"); r.status != StatusAPILimitExceeded {
		t.Fatalf("9s into a 10s exhaustion: %d, want 420", r.status)
	}
	e.clock.Advance(time.Second)
	for i := range 3 {
		if r := e.get("/api/v2.0/devices/"); r.status != 200 {
			t.Fatalf("request %d of the new budget: %d", i+1, r.status)
		}
	}
	if r := e.get("/api/v2.0/devices/"); r.status != StatusAPILimitExceeded {
		t.Fatalf("past the new budget: %d, want 420", r.status)
	}
}

func TestRateLimitControlInterfaceSetsExhaustsAndReports(t *testing.T) {
	e := newEnv(t, Options{})
	if r := e.do("PUT", "/_sim/ratelimit", map[string]any{"rate_limit": 2, "burst": 1}, "-"); r.status != 204 {
		t.Fatalf("PUT /_sim/ratelimit: %d %s", r.status, r.body)
	}
	if r := e.do("PUT", "/_sim/ratelimit", map[string]any{"rate_limit": -1}, "-"); r.status != 400 {
		t.Fatalf("a negative rate: %d, want 400", r.status)
	}
	if a, b := e.get("/api/v2.0/devices/").status, e.get("/api/v2.0/devices/").status; a != 200 || b != 429 {
		t.Fatalf("burst 1: %d then %d, want 200 then 429", a, b)
	}
	if r := e.do("POST", "/_sim/ratelimit/exhaust", map[string]any{"for": "5s"}, "-"); r.status != 204 {
		t.Fatalf("exhaust: %d %s", r.status, r.body)
	}
	e.clock.Advance(4 * time.Second)
	if r := e.get("/api/v2.0/devices/"); r.status != StatusAPILimitExceeded {
		t.Fatalf("during an exhaustion: %d, want 420", r.status)
	}
	e.clock.Advance(time.Second)
	if r := e.get("/api/v2.0/devices/"); r.status != 200 {
		t.Fatalf("after the exhaustion: %d, want 200", r.status)
	}
	r := e.do("GET", "/_sim/ratelimit/stats", nil, "-")
	var stats []RateSecond
	if err := json.Unmarshal(r.body, &stats); err != nil || r.status != http.StatusOK {
		t.Fatalf("stats: %d %v %s", r.status, err, r.body)
	}
	var adm, lim, exh int
	for _, s := range stats {
		adm, lim, exh = adm+s.Admitted, lim+s.Limited, exh+s.Exhausted
	}
	if adm != 2 || lim != 1 || exh != 1 || len(stats) != 3 {
		t.Fatalf("stats over 3 seconds: admitted %d, 429 %d, 420 %d in %d seconds, want 2, 1, 1 in 3: %s", adm, lim, exh, len(stats), r.body)
	}
}

func TestAPageSizeAboveTheRejectLimitIsA400AndBelowItIsServed(t *testing.T) {
	e := newEnv(t, Options{RejectPageSizeAbove: 200})
	if r := e.get("/api/v2.0/devices/?page_size=201"); r.status != 400 || !json.Valid(r.body) || !strings.Contains(string(r.body), "page_size") {
		t.Fatalf("page_size 201 above 200: %d %s, want 400 naming page_size", r.status, r.body)
	}
	if r := e.get("/api/v2.0/devices/?page_size=200"); r.status != 200 {
		t.Fatalf("page_size 200: %d, want 200", r.status)
	}
	e2 := newEnv(t, Options{})
	if r := e2.get("/api/v2.0/devices/?page_size=5000"); r.status != 200 {
		t.Fatalf("page_size 5000 without the option: %d, want 200 (clamped)", r.status)
	}
}
