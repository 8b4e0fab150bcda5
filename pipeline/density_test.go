package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// cuts are every cut a source may make of a frame the limit cut, and
// every order it may serve a frame in.
var cuts = []pipelinetest.Cut{pipelinetest.CutNewestDesc, pipelinetest.CutOldestAsc, pipelinetest.CutNewestAsc, pipelinetest.CutNewestShuffled, pipelinetest.CutAnyShuffled}

func TestEngineProvesFramesOfExactlyTheLimitWholeByCountInOneReadEach(t *testing.T) {
	for _, cut := range cuts {
		t.Run(cut.String(), func(t *testing.T) {
			src, targets := pipelinetest.Fixture(12, 100, 1_700_000_000_000)
			src.Cut = cut
			w := &pipelinetest.Writer{}
			st := &pipelinetest.Store{}
			res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 4, MaxInFlight: 2, Counts: src}, nil, nil, nil).Run(context.Background(), targets)
			if len(res.Failed) != 0 {
				t.Fatalf("failed: %v", res.Failed)
			}
			pipelinetest.CheckLoaded(t, src, w, targetIDs(targets))
			if src.Requests() != 3 || res.Requests != 3 || res.MinRequests != 3 || src.Counts() != 3 || res.CountRequests != 3 {
				t.Errorf("%d raw-series requests (reported %d, minimum %d) and %d counts (reported %d), want 3, 3, 3 and 3",
					src.Requests(), res.Requests, res.MinRequests, src.Counts(), res.CountRequests)
			}
			if res.RowsServed != 1200 || res.Reloaded != 0 || res.Points != 1200 {
				t.Errorf("served %d rows, loaded %d of which %d again; want 1200, 1200 and 0", res.RowsServed, res.Points, res.Reloaded)
			}
		})
	}
}

func TestEngineIsExactOverDenseDataUnderEveryTruncationAndOrder(t *testing.T) {
	for _, cut := range cuts {
		t.Run(cut.String(), func(t *testing.T) {
			src, targets := pipelinetest.Fixture(7, 1000, 1_700_000_000_000)
			src.Cut = cut
			w := &pipelinetest.Writer{}
			st := &pipelinetest.Store{}
			res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 64, VariablesPerRequest: 3, MaxInFlight: 3, BatchRows: 500, Counts: src}, nil, nil, nil).Run(context.Background(), targets)
			if len(res.Failed) != 0 {
				t.Fatalf("failed: %v", res.Failed)
			}
			pipelinetest.CheckLoaded(t, src, w, targetIDs(targets))
			for _, id := range targetIDs(targets) {
				pts := src.Points(id)
				if got, want := st.Marks()[id].HwmMs, pts[len(pts)-1].TsMs; got != want {
					t.Errorf("mark of %s = %d, want %d", id, got, want)
				}
			}
			if got := res.Points - res.Reloaded; got != 7000 {
				t.Errorf("%d points loaded, %d of them again: %d distinct, want 7000", res.Points, res.Reloaded, got)
			}
			served := float64(res.RowsServed) / 7000
			t.Logf("%s: %d raw-series requests (minimum %d), %d counts, rows served/loaded %.2f", cut, res.Requests, res.MinRequests, res.CountRequests, served)
			// A limit that truncates in time lets the counts prove the
			// inside of each cut frame: little is served twice.
			if cut != pipelinetest.CutAnyShuffled && served > 1.1 {
				t.Errorf("rows served per point %.2f, want at most 1.1 when the limit truncates in time", served)
			}
		})
	}
}

func TestEngineDoesNotTrustACountThatAPointArrivingAfterTheReadChanged(t *testing.T) {
	src, targets := pipelinetest.Fixture(2, 100, 1_700_000_000_000)
	src.Cut = pipelinetest.CutNewestDesc
	late := pipeline.Point{TsMs: 1_700_000_000_000 + 500, Value: 42, Context: []byte("{}")}
	once := sync.Once{}
	src.OnCount = func([]string, int64, int64) error {
		once.Do(func() { src.Add("v000", late) })
		return nil
	}
	w := &pipelinetest.Writer{}
	res := pipeline.NewEngine(src, w, &pipelinetest.Store{}, pipeline.EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 2, Counts: src}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	if _, ok := w.Row("v000", late.TsMs); !ok {
		t.Fatalf("the point that arrived between the read and its count was not loaded (%d requests, %d counts)", res.Requests, res.CountRequests)
	}
	pipelinetest.CheckLoaded(t, src, w, targetIDs(targets))
}

func TestEngineWithoutCountsReadsCutFramesAgainInHalves(t *testing.T) {
	src, targets := pipelinetest.Fixture(3, 100, 1_700_000_000_000)
	w := &pipelinetest.Writer{}
	res := pipeline.NewEngine(src, w, &pipelinetest.Store{}, pipeline.EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 3}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	pipelinetest.CheckLoaded(t, src, w, targetIDs(targets))
	if res.Splits != 1 || res.Requests != 3 || res.CountRequests != 0 || res.Reloaded != 300 {
		t.Errorf("%d splits, %d requests, %d counts, %d re-loaded; want 1, 3, 0 and 300 (a frame of the limit is never trusted)", res.Splits, res.Requests, res.CountRequests, res.Reloaded)
	}
}

func TestEngineStopsCountingOnceTheServiceCannotCount(t *testing.T) {
	src, targets := pipelinetest.Fixture(6, 300, 1_700_000_000_000)
	src.Cut = pipelinetest.CutNewestDesc
	src.OnCount = func([]string, int64, int64) error {
		return errors.New("the aggregation answer has neither value nor count")
	}
	w := &pipelinetest.Writer{}
	res := pipeline.NewEngine(src, w, &pipelinetest.Store{}, pipeline.EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 2, MaxInFlight: 1, Counts: src}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	pipelinetest.CheckLoaded(t, src, w, targetIDs(targets))
	if src.Counts() != 1 || res.CountRequests != 1 {
		t.Fatalf("%d counts asked (reported %d) after a count failed for good, want the 1 that failed", src.Counts(), res.CountRequests)
	}
}
