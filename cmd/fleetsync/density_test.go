package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// A dense first sync at the defaults (rows_per_request 10000, 50 variables
// per request), under every order in which the simulator can serve a frame
// the limit cut: exact, and with few requests beyond the minimum the limit
// allows. Frames of exactly the limit are the worst case for a reader that
// cannot tell a whole frame from a cut one.
func TestSyncDenseFirstSyncAtTheDefaultsIsExactInEveryRowOrder(t *testing.T) {
	for _, order := range []string{"newest", "oldest", "shuffled", "newest-ascending"} {
		for _, c := range []struct {
			name                      string
			devices, variables, point int
			maxPerMinimum             float64
		}{
			// 52 variables of exactly the limit: two requests at least.
			{"frames of exactly the limit", 4, 13, 10000, 1.2},
			// Variables of 2.5 limits: the cut frames' remainders.
			{"frames of 2.5 limits", 1, 4, 25000, 1.5},
		} {
			t.Run(order+"/"+c.name, func(t *testing.T) {
				o, err := fleetsim.ParseSeriesOrder(order)
				if err != nil {
					t.Fatal(err)
				}
				w := newWorld(t, worldOpts{sim: fleetsim.Options{Seed: 11, Devices: c.devices, Variables: c.variables, Points: c.point,
					Span: 2 * 24 * time.Hour, SeriesOrder: o}})
				_, logs := w.sync()
				n := w.checkOracle()
				s := cycleSummary(t, logs)
				q, wr := s["requests_per_minimum"].(float64), s["rows_served_per_loaded"].(float64)
				t.Logf("%d points: %v raw-series requests (minimum %v, ratio %.2f), %v count requests, rows served/loaded %.2f",
					n, s["requests"], s["requests_minimum"], q, s["count_requests"], wr)
				if q <= 0 || wr < 1 {
					t.Fatalf("summary reports requests/minimum %v and rows served/loaded %v; want both measured", q, wr)
				}
				if c.maxPerMinimum > 0 && (q > c.maxPerMinimum || wr > 1.1) {
					t.Fatalf("requests/minimum %.2f (want <= %.1f), rows served/loaded %.2f (want <= 1.1); summary: %s",
						q, c.maxPerMinimum, wr, summaryLine(logs))
				}
			})
		}
	}
}

func summaryLine(logs string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"cycle finished"`) {
			return l
		}
	}
	return fmt.Sprintf("(none in %d bytes of logs)", len(logs))
}
