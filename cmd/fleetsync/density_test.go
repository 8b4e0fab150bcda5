package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// The cuts and row orders fleetsim can serve a per-variable frame in (its
// --series-cut and --series-order): the spec says neither which points a
// frame cut by `limit` keeps nor the order it serves them in.
var (
	everyCut      = []fleetsim.SeriesCut{fleetsim.CutNewest, fleetsim.CutOldest, fleetsim.CutAny, fleetsim.CutMixed}
	everyRowOrder = []fleetsim.RowOrder{fleetsim.RowsNewestFirst, fleetsim.RowsOldestFirst, fleetsim.RowsShuffled}
)

// denseCase is a dense fleet synced in one first cycle.
type denseCase struct {
	name                      string
	devices, variables, point int
	span                      time.Duration
	extra                     string // the sync section's settings
	// everyCut runs the case under each cut; false: the newest only (its
	// frames are never cut, so the cut changes nothing).
	everyCut bool
	// maxPerMinimum bounds the raw-series requests over the minimum the
	// limit allows, and maxServedPerLoaded the rows served per row loaded,
	// under every cut that truncates in time (all but any, whose frames no
	// count proves between their edges: they are read again in halves, and
	// are only asserted exact); 0: no bound.
	maxPerMinimum, maxServedPerLoaded float64
}

// runDense syncs c once under every cut (or the newest only) and every row
// order, each into a fresh database, and asserts the warehouse is exact
// (checkOracle) and the requests within c's bounds.
func runDense(t *testing.T, c denseCase) {
	cuts := everyCut
	if !c.everyCut {
		cuts = cuts[:1]
	}
	for _, cut := range cuts {
		for _, rows := range everyRowOrder {
			t.Run(fmt.Sprintf("cut %s/%s/%s", cut, rows, c.name), func(t *testing.T) {
				w := newWorld(t, worldOpts{sim: fleetsim.Options{Seed: 11, Devices: c.devices, Variables: c.variables, Points: c.point,
					Span: c.span, SeriesOrder: fleetsim.SeriesOrder{Cut: cut, Rows: rows}}, sync: c.extra})
				_, logs := w.sync()
				n := w.checkOracle()
				s := cycleSummary(t, logs)
				q, wr := s["requests_per_minimum"].(float64), s["rows_served_per_loaded"].(float64)
				t.Logf("%d points: %v raw-series requests (minimum %v, ratio %.2f), %v count requests, rows served/loaded %.2f",
					n, s["requests"], s["requests_minimum"], q, s["count_requests"], wr)
				if q <= 0 || wr < 1 {
					t.Fatalf("summary reports requests/minimum %v and rows served/loaded %v; want both measured", q, wr)
				}
				if cut == fleetsim.CutAny {
					return
				}
				if c.maxPerMinimum > 0 && q > c.maxPerMinimum || c.maxServedPerLoaded > 0 && wr > c.maxServedPerLoaded {
					t.Fatalf("requests/minimum %.2f (want <= %.2f), rows served/loaded %.2f (want <= %.2f); summary: %s",
						q, c.maxPerMinimum, wr, c.maxServedPerLoaded, summaryLine(logs))
				}
			})
		}
	}
}

// A dense first sync at the defaults (rows_per_request 10000, 50 variables
// per request), under every cut of the frames the limit truncated and every
// order of their rows: exact, and, for every cut that truncates in time,
// with few requests beyond the minimum the limit allows.
// Frames of exactly the limit are the worst case for a reader that cannot
// tell a whole frame from a cut one.
func TestSyncDenseFirstSyncAtTheDefaultsIsExactInEveryRowOrder(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	for _, c := range []denseCase{
		// 51 variables of exactly the limit (one is empty): two requests
		// at least. No frame holds more than the limit, so no cut.
		{name: "frames of exactly the limit", devices: 4, variables: 13, point: 10000, span: 2 * 24 * time.Hour,
			maxPerMinimum: 1.2, maxServedPerLoaded: 1.1},
		// Variables of 2.5 limits: the cut frames' remainders. Under the
		// mixed cut the frames of the request proven at different ends
		// read their remainders in two requests instead of one: 5 for a
		// minimum of 3.
		{name: "frames of 2.5 limits", devices: 1, variables: 4, point: 25000, span: 2 * 24 * time.Hour, everyCut: true,
			maxPerMinimum: 1.7, maxServedPerLoaded: 1.1},
	} {
		runDense(t, c)
	}
}

// A dense first sync with small requests (rows_per_request 500), under every
// cut and every row order: exact. Under the mixed cut the frames of one
// request are cut at different ends; where they overlap (windows of less
// than two limits), a count proves the newest-cut frames whole from their
// smallest timestamp up and the oldest-cut ones only between the frames'
// edges, so the re-reads of each frame must follow its own proven window,
// not another frame's.
func TestSyncDenseFirstSyncWithSmallRequestsIsExactUnderEveryCutAndRowOrder(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	for _, c := range []denseCase{
		// 8 variables of 12 limits, all in the first request: windows
		// halved down to 1.5 limits.
		{name: "8 variables of 12 limits", devices: 2, variables: 4, point: 6000, span: 6 * time.Hour,
			extra: "rows_per_request: 500", everyCut: true},
		// 48 variables of 1.6 limits, 4 per request: every first frame is
		// cut, and 12 requests each mix the cuts (or not) their own way.
		{name: "48 variables of 1.6 limits", devices: 8, variables: 6, point: 800, span: 6 * time.Hour,
			extra: "rows_per_request: 500\nvariables_per_request: 4", everyCut: true},
	} {
		runDense(t, c)
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
