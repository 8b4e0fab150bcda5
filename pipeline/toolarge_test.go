package pipeline

import (
	"context"
	"sync"
	"testing"
)

// holdingSource answers a request whose response would hold more than
// maxRows rows with a tooLarge error, before anything reaches the sink, as
// fleetapi does for `results` served before `columns` past its bound.
type holdingSource struct {
	*memSource
	maxRows int

	mu       sync.Mutex
	tooLarge int
	largest  int // the most rows a served response held
}

type tooLargeErr struct{}

func (tooLargeErr) Error() string  { return "results before columns held more than the bound" }
func (tooLargeErr) TooLarge() bool { return true }

func (s *holdingSource) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	rows := 0
	s.memSource.mu.Lock()
	for _, id := range req.VariableIDs {
		rows += min(len(inWindow(s.points[id], req.Start, req.End)), req.Limit)
	}
	s.memSource.mu.Unlock()
	s.mu.Lock()
	if rows > s.maxRows {
		s.tooLarge++
		s.mu.Unlock()
		return tooLargeErr{}
	}
	s.largest = max(s.largest, rows)
	s.mu.Unlock()
	return s.memSource.Series(ctx, req, sink)
}

// readHolding reads targets alone through a source that holds maxRows
// rows of a response, and checks that every point was read once, every
// target is done and no response past the bound was served.
func readHolding(t *testing.T, mem *memSource, targets []Target, maxRows int, o EngineOptions) (*holdingSource, *reader) {
	t.Helper()
	src := &holdingSource{memSource: mem, maxRows: maxRows}
	d, r, c := readAlone(t, src, targets, o, 0)
	checkReadOnce(t, d, mem, ids(targets), 0)
	checkDone(t, d, c, targets)
	if src.largest > src.maxRows {
		t.Errorf("a response of %d rows was served, the source holds %d", src.largest, src.maxRows)
	}
	return src, r
}

func TestReaderReadsResponsesTooLargeToHoldInSmallerRequests(t *testing.T) {
	// 8 variables of 100 points a request, a source that holds 250 rows:
	// the request is read in halves, then quarters (one request in
	// flight, so that the order is fixed).
	mem, targets := fixture(8, 100, 1_700_000_000_000)
	src, r := readHolding(t, mem, targets, 250, EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 8, MaxInFlight: 1})
	// 8 too large, then 2 of 4 too large, then 4 requests of 2.
	if src.tooLarge != 3 || r.n.requests.Load() != 7 {
		t.Errorf("%d responses too large of %d requests; want 3 of 7", src.tooLarge, r.n.requests.Load())
	}
}

// A fleet whose every request is too large learns, once both halves of
// a split were too large too, to send requests of fewer variables: the
// second request of 16 is sent as eight of 2, not split down again.
func TestReaderLearnsToSendFewerVariablesWhenBothHalvesAreTooLarge(t *testing.T) {
	mem, targets := fixture(32, 100, 1_700_000_000_000)
	src, r := readHolding(t, mem, targets, 250, EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 16, MaxInFlight: 1})
	// 16, 8 and both 4s of that 8 too large (the cap is then 2); the
	// other 8 and the second 16 go as requests of 2.
	if src.tooLarge != 4 || r.n.requests.Load() != 20 || r.varCap.Load() != 2 {
		t.Errorf("%d responses too large of %d requests, at most %d variables a request; want 4 of 20, 2", src.tooLarge, r.n.requests.Load(), r.varCap.Load())
	}
}

// One dense variable among many makes only its own requests smaller:
// the others are read 50 a request as before, not one at a time.
func TestReaderReadsOnlyTheRequestsOfADenseVariableSmaller(t *testing.T) {
	const start = 1_700_000_000_000
	mem, targets := fixture(200, 10, start)
	for i := range 1000 {
		mem.points["v000"] = append(mem.points["v000"], Point{TsMs: start + 20_000 + int64(i), Context: []byte("{}")})
	}
	for i := range targets {
		targets[i].End = start + 40_000
	}
	src, r := readHolding(t, mem, targets, 500, EngineOptions{RowsPerRequest: 2000, VariablesPerRequest: 50, MaxInFlight: 1})
	// The dense variable's request: 50, 25, 13, 7, 4, 2 and 1 variables too
	// large, then its window in halves: a few dozen requests, not the
	// 200 that reading every variable alone would take.
	if r.varCap.Load() != 0 {
		t.Errorf("one dense variable set the pass's cap to %d variables a request", r.varCap.Load())
	}
	if n := r.n.requests.Load(); n > 40 {
		t.Errorf("%d requests (%d too large) for 200 variables, one of them dense; want at most 40", n, src.tooLarge)
	}
}

// A request that reaches into the future (every cycle's last) and is too
// large for the points ahead of its end alone: read closed at its end,
// the future noted for a later cycle, instead of halved down to one
// millisecond and failed (which would fail the variable every cycle).
func TestReaderReadsAnOpenRequestTooLargeForItsFutureClosed(t *testing.T) {
	const start = 1_700_000_000_000
	mem, targets := fixture(1, 10, start)
	id := targets[0].Variable.ID
	end := targets[0].End
	for i := range 20 {
		mem.points[id] = append(mem.points[id], Point{TsMs: end + 1000 + int64(i), Context: []byte("{}")})
	}
	targets[0].ReadFuture = true
	src := &holdingSource{memSource: mem, maxRows: 8}
	d, _, c := readAlone(t, src, targets, EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 4}, 0)
	if len(c.failed) > 0 {
		t.Fatalf("the variable failed: %v", c.failed[0].Err)
	}
	if len(d.rows[id]) != 10 {
		t.Errorf("%d rows loaded, want the window's 10", len(d.rows[id]))
	}
}

func TestReaderReadsTheWindowOfOneVariableTooLargeToHoldInHalves(t *testing.T) {
	mem, targets := fixture(1, 1000, 1_700_000_000_000)
	src, _ := readHolding(t, mem, targets, 300, EngineOptions{RowsPerRequest: 2000, VariablesPerRequest: 4})
	if src.tooLarge == 0 {
		t.Error("no response was too large, so the test shows nothing")
	}
}
