package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// TestFaultTokensLastingSecondsAreRotatedThroughTheTokenFile is scenario 6
// with tokens that really expire: fleetsim's tokens last one second, and a
// rotator mints a new one every 300ms and writes it to source.token_file, as
// a secret manager would. The daemon's cycle outlives several tokens, so
// requests meet 401s mid-cycle; each is recovered by re-reading the file, no
// variable fails, the oracle holds, and no token ever appears in the logs or
// the metrics.
func TestFaultTokensLastingSecondsAreRotatedThroughTheTokenFile(t *testing.T) {
	const ttl = time.Second
	w := newFaultWorld(t, worldOpts{
		sim: fleetsim.Options{Devices: 3, Variables: 3, Points: 200, Span: 5 * 24 * time.Hour, TokenTTL: ttl,
			Faults: fleetsim.Faults{Latency: 40 * time.Millisecond}},
		sync: `schedule: "@every 1h"` + "\nrows_per_request: 100\nvariables_per_request: 1\nmax_in_flight: 1",
	})
	var (
		mu     sync.Mutex
		minted = []string{testToken}
	)
	stop := make(chan struct{})
	rotated := make(chan struct{})
	go func() {
		defer close(rotated)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			tok := fmt.Sprintf("rotated-%d-s3cr3t", i)
			w.sim.AddToken(tok, fleetsim.TokenOrdinary, ttl)
			w.writeToken(tok)
			mu.Lock()
			minted = append(minted, tok)
			mu.Unlock()
		}
	}()
	start := time.Now()
	d := w.startDaemon(nil)
	d.awaitSuccessfulCycle(t, 2*time.Minute)
	took := time.Since(start)
	body := d.metrics()
	if code := d.stop(t); code != 0 {
		t.Fatalf("the daemon exited %d on cancellation", code)
	}
	close(stop)
	<-rotated
	logs := d.stderr.String()

	n401 := w.counter(" 401")
	mu.Lock()
	tokens := minted
	mu.Unlock()
	t.Logf("first cycle took %s across %d tokens; %d requests answered 401", took.Round(time.Millisecond), len(tokens), n401)
	if n401 == 0 {
		t.Fatalf("no request met an expired token in a %s cycle with %s tokens; slow the cycle down", took, ttl)
	}
	if sums := logLines(t, logs, "cycle finished"); len(sums) != 1 || sums[0]["failed"] != float64(0) {
		t.Fatalf("the cycle did not finish without failures: %v\n%s", sums, lastLines(logs, 8))
	}
	for i, tok := range tokens {
		if strings.Contains(logs, tok) || strings.Contains(body, tok) {
			t.Fatalf("token %d of %d appears in the logs or the metrics", i+1, len(tokens))
		}
	}
	w.checkMarksCovered(nil)
	w.checkOracle()
}
