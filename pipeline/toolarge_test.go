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

func TestReaderReadsResponsesTooLargeToHoldInSmallerRequests(t *testing.T) {
	// 8 variables of 100 points a request, a source that holds 250 rows:
	// the request is read in halves, then quarters, and once a half was
	// too large no request of the pass names more than that half, so the
	// other half is split before it is sent, not sent to be dropped (one
	// request in flight, so that the order is fixed).
	mem, targets := fixture(8, 100, 1_700_000_000_000)
	src := &holdingSource{memSource: mem, maxRows: 250}
	d, r, c := readAlone(t, src, targets, EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 8, MaxInFlight: 1}, 0)
	checkReadOnce(t, d, mem, ids(targets), 0)
	checkDone(t, d, c, targets)
	if src.largest > src.maxRows {
		t.Errorf("a response of %d rows was served, the source holds %d", src.largest, src.maxRows)
	}
	// 8 too large, then 4 too large, then 4 requests of 2.
	if src.tooLarge != 2 || r.n.requests.Load() != 6 || r.varCap.Load() != 2 {
		t.Errorf("%d responses too large of %d requests, at most %d variables a request; want 2 of 6, 2", src.tooLarge, r.n.requests.Load(), r.varCap.Load())
	}
}

func TestReaderReadsTheWindowOfOneVariableTooLargeToHoldInHalves(t *testing.T) {
	mem, targets := fixture(1, 1000, 1_700_000_000_000)
	src := &holdingSource{memSource: mem, maxRows: 300}
	d, _, c := readAlone(t, src, targets, EngineOptions{RowsPerRequest: 2000, VariablesPerRequest: 4}, 0)
	checkReadOnce(t, d, mem, ids(targets), 0)
	checkDone(t, d, c, targets)
	if src.largest > src.maxRows || src.tooLarge == 0 {
		t.Errorf("largest response %d rows after %d too large; want at most %d", src.largest, src.tooLarge, src.maxRows)
	}
}
