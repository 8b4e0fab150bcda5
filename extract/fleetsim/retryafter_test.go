package fleetsim

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfterDeadlinesAreRecordedAndEarlyRetriesCounted(t *testing.T) {
	for _, dateForm := range []bool{false, true} {
		name := "seconds"
		if dateForm {
			name = "http-date"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, Options{})
			// The fake clock sits 250ms into a second, so the date form must round up.
			e.clock.Advance(250 * time.Millisecond)
			e.sim.SetFaults(Faults{RateLimitRate: 1, RetryAfter: "2", RetryAfterDate: dateForm})
			r := e.get("/api/v2.0/devices/")
			if r.status != 429 {
				t.Fatalf("with rate_limit_rate 1: status %d", r.status)
			}
			ra := r.header.Get("Retry-After")
			want := "2"
			if dateForm {
				want = e.clock.Now().Add(2*time.Second + 750*time.Millisecond).UTC().Format(http.TimeFormat)
			}
			if ra != want {
				t.Fatalf("Retry-After %q, want %q", ra, want)
			}
			// The identical request one second later is early; a different
			// request is not.
			e.clock.Advance(time.Second)
			_ = e.get("/api/v2.0/devices/")
			_ = e.get("/api/v2.0/devices/?page=2&page_size=1")
			if n := e.sim.Counters()["early GET /api/v2.0/devices/"]; n != 1 {
				t.Fatalf("early retries counted %d, want 1: %v", n, e.sim.Counters())
			}
			// Served normally once the deadline (renewed by the second 429) has passed.
			e.sim.SetFaults(Faults{})
			e.clock.Advance(3 * time.Second)
			for _, p := range []string{"/api/v2.0/devices/", "/api/v2.0/devices/?page=2&page_size=1"} {
				if r := e.get(p); r.status != 200 {
					t.Fatalf("%s after the deadline: status %d", p, r.status)
				}
			}
			if n := e.sim.Counters()["early GET /api/v2.0/devices/"]; n != 1 {
				t.Fatalf("a request after the deadline counted as early: %v", e.sim.Counters())
			}
			// The bookkeeping was forgotten with the 200: nothing is pending.
			e.sim.retryMu.Lock()
			pending := len(e.sim.retryAt)
			e.sim.retryMu.Unlock()
			if pending != 0 {
				t.Fatalf("%d Retry-After deadlines still pending after the requests succeeded", pending)
			}
		})
	}
}

func TestRetryAfterDateNeedsWholeSeconds(t *testing.T) {
	if _, err := New(Options{Faults: Faults{RateLimitRate: 1, RetryAfter: "soon", RetryAfterDate: true}}); err == nil {
		t.Fatal("New accepted a Retry-After date form of a non-number")
	}
}

func TestFaultsConfinedToVariablesHitOnlyRequestsNamingThem(t *testing.T) {
	e := newEnv(t, Options{})
	ids := e.variableIDs()
	bad, good := ids[0], ids[1]
	e.sim.SetFaults(Faults{ErrorRate: 1, Variables: []string{bad}})
	series := func(vars ...string) int {
		r, _, _ := e.rawSeries(map[string]any{"variables": vars, "columns": []string{"value.value", "timestamp"}, "join_dataframes": false})
		return r.status
	}
	if st := series(bad); st != 500 && st != 503 {
		t.Fatalf("raw series of the faulted variable: %d, want 500 or 503", st)
	}
	if st := series(good, bad); st != 500 && st != 503 {
		t.Fatalf("raw series naming the faulted variable among others: %d, want 500 or 503", st)
	}
	if st := series(good); st != 200 {
		t.Fatalf("raw series of another variable: %d, want 200", st)
	}
	if r := e.get("/api/v1.6/variables/" + bad + "/values"); r.status != 500 && r.status != 503 {
		t.Fatalf("values of the faulted variable: %d", r.status)
	}
	if r := e.get("/api/v1.6/variables/" + good + "/values"); r.status != 200 {
		t.Fatalf("values of another variable: %d", r.status)
	}
	if r := e.get("/api/v2.0/devices/"); r.status != 200 {
		t.Fatalf("a Platform request under variable-confined faults: %d", r.status)
	}
	if got := e.sim.CurrentFaults().Variables; len(got) != 1 || got[0] != bad {
		t.Fatalf("CurrentFaults().Variables = %v", got)
	}
	// The control interface carries the new keys both ways.
	r := e.do("PUT", "/_sim/faults", map[string]any{"rate_limit_rate": 1, "retry_after": "3", "retry_after_date": true, "variables": []string{good}}, "-")
	expect(t, "set confined faults", r, 200, nil)
	if f := e.sim.CurrentFaults(); !f.RetryAfterDate || len(f.Variables) != 1 || f.Variables[0] != good {
		t.Fatalf("faults after PUT: %+v", f)
	}
	if st := series(good); st != 429 {
		t.Fatalf("raw series of the newly faulted variable: %d, want 429", st)
	}
	if st := series(bad); st != 200 {
		t.Fatalf("raw series of the variable no longer faulted: %d, want 200", st)
	}
}
