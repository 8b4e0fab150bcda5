package pipeline_test

import (
	"sync"
	"testing"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// holding is what hold saw: the responses too large, and the most rows
// a served response held.
type holding struct {
	mu                sync.Mutex
	tooLarge, largest int
}

// hold makes src answer a request whose response would hold more than
// maxRows rows with a tooLarge error, before anything reaches the sink, as
// fleetapi does for `results` served before `columns` past its bound.
func hold(src *pipelinetest.Source, maxRows int) *holding {
	h := &holding{}
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
		rows := 0
		for _, id := range req.VariableIDs {
			in := 0
			for _, p := range src.Points(id) {
				if p.TsMs >= req.Start && p.TsMs <= req.End {
					in++
				}
			}
			rows += min(in, req.Limit)
		}
		h.mu.Lock()
		if rows > maxRows {
			h.tooLarge++
			h.mu.Unlock()
			return tooLargeErr{}
		}
		h.largest = max(h.largest, rows)
		h.mu.Unlock()
		return serve(sink)
	}
	return h
}

type tooLargeErr struct{}

func (tooLargeErr) Error() string  { return "results before columns held more than the bound" }
func (tooLargeErr) TooLarge() bool { return true }

// readHolding reads targets alone through src holding maxRows rows of a
// response, and checks that every point was read once, every target is
// done and no response past the bound was served.
func readHolding(t *testing.T, src *pipelinetest.Source, targets []pipeline.Target, maxRows int, o pipeline.EngineOptions) (*holding, *pipeline.Reading) {
	t.Helper()
	h := hold(src, maxRows)
	rd := readAlone(src, targets, o, 0)
	checkReadOnce(t, rd, src, targetIDs(targets), 0)
	checkDone(t, rd, targets)
	if h.largest > maxRows {
		t.Errorf("a response of %d rows was served, the source holds %d", h.largest, maxRows)
	}
	return h, rd
}

func TestReaderReadsResponsesTooLargeToHoldInSmallerRequests(t *testing.T) {
	// 8 variables of 100 points a request, a source that holds 250 rows:
	// the request is read in halves, then quarters (one request in
	// flight, so that the order is fixed).
	src, targets := pipelinetest.Fixture(8, 100, 1_700_000_000_000)
	h, rd := readHolding(t, src, targets, 250, pipeline.EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 8, MaxInFlight: 1})
	// 8 too large, then 2 of 4 too large, then 4 requests of 2.
	if h.tooLarge != 3 || rd.Requests != 7 {
		t.Errorf("%d responses too large of %d requests; want 3 of 7", h.tooLarge, rd.Requests)
	}
}

// A fleet whose every request is too large learns, once both halves of
// a split were too large too, to send requests of fewer variables: the
// second request of 16 is sent as eight of 2, not split down again.
func TestReaderLearnsToSendFewerVariablesWhenBothHalvesAreTooLarge(t *testing.T) {
	src, targets := pipelinetest.Fixture(32, 100, 1_700_000_000_000)
	h, rd := readHolding(t, src, targets, 250, pipeline.EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 16, MaxInFlight: 1})
	// 16, 8 and both 4s of that 8 too large (the cap is then 2); the
	// other 8 and the second 16 go as requests of 2.
	if h.tooLarge != 4 || rd.Requests != 20 || rd.VarCap != 2 {
		t.Errorf("%d responses too large of %d requests, at most %d variables a request; want 4 of 20, 2", h.tooLarge, rd.Requests, rd.VarCap)
	}
}

// One dense variable among many makes only its own requests smaller:
// the others are read 50 a request as before, not one at a time.
func TestReaderReadsOnlyTheRequestsOfADenseVariableSmaller(t *testing.T) {
	const start = 1_700_000_000_000
	src, targets := pipelinetest.Fixture(200, 10, start)
	for i := range 1000 {
		src.Add("v000", pipeline.Point{TsMs: start + 20_000 + int64(i), Context: []byte("{}")})
	}
	for i := range targets {
		targets[i].End = start + 40_000
	}
	h, rd := readHolding(t, src, targets, 500, pipeline.EngineOptions{RowsPerRequest: 2000, VariablesPerRequest: 50, MaxInFlight: 1})
	// The dense variable's request: 50, 25, 13, 7, 4, 2 and 1 variables too
	// large, then its window in halves: a few dozen requests, not the
	// 200 that reading every variable alone would take.
	if rd.VarCap != 0 {
		t.Errorf("one dense variable set the pass's cap to %d variables a request", rd.VarCap)
	}
	if n := rd.Requests; n > 40 {
		t.Errorf("%d requests (%d too large) for 200 variables, one of them dense; want at most 40", n, h.tooLarge)
	}
}

// A request that reaches into the future (every cycle's last) and is too
// large for the points ahead of its end alone: read closed at its end,
// the future noted for a later cycle, instead of halved down to one
// millisecond and failed (which would fail the variable every cycle).
func TestReaderReadsAnOpenRequestTooLargeForItsFutureClosed(t *testing.T) {
	const start = 1_700_000_000_000
	src, targets := pipelinetest.Fixture(1, 10, start)
	id := targets[0].Variable.ID
	end := targets[0].End
	for i := range 20 {
		src.Add(id, pipeline.Point{TsMs: end + 1000 + int64(i), Context: []byte("{}")})
	}
	targets[0].ReadFuture = true
	hold(src, 8)
	rd := readAlone(src, targets, pipeline.EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 4}, 0)
	if failed := rd.Result.Failed; len(failed) > 0 {
		t.Fatalf("the variable failed: %v", failed[0].Err)
	}
	if len(rd.Rows[id]) != 10 {
		t.Errorf("%d rows loaded, want the window's 10", len(rd.Rows[id]))
	}
}

func TestReaderReadsTheWindowOfOneVariableTooLargeToHoldInHalves(t *testing.T) {
	src, targets := pipelinetest.Fixture(1, 1000, 1_700_000_000_000)
	h, _ := readHolding(t, src, targets, 300, pipeline.EngineOptions{RowsPerRequest: 2000, VariablesPerRequest: 4})
	if h.tooLarge == 0 {
		t.Error("no response was too large, so the test shows nothing")
	}
}
