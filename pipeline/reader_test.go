package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// The reader on its own (pipeline.ReadAlone): splitting, proofs and the
// floor against the kit's source, with a drain in place of the loaders
// that takes each chunk's rows and acknowledges its spans to the
// committer at once. What the reader tells the committer is read back
// from it.

// checkReadOnce fails unless the reader handed on each of the source's
// points of ids from floor on exactly once.
func checkReadOnce(t *testing.T, rd *pipeline.Reading, src *pipelinetest.Source, ids []string, floor int64) {
	t.Helper()
	for _, id := range ids {
		var want []int64
		for _, p := range src.Points(id) {
			if p.TsMs >= floor {
				want = append(want, p.TsMs)
			}
		}
		got := slices.Clone(rd.Rows[id])
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: handed on %d rows, want each of the source's %d once (first %v, want %v)", id, len(got), len(want), got[:min(len(got), 5)], want[:min(len(want), 5)])
		}
	}
}

// checkDone fails unless the committer has every target done, with as many
// points acknowledged as the reader handed on.
func checkDone(t *testing.T, rd *pipeline.Reading, targets []pipeline.Target) {
	t.Helper()
	for _, tg := range targets {
		id := tg.Variable.ID
		if points, done := rd.Points[id], rd.Done[id]; !done || points != int64(len(rd.Rows[id])) {
			t.Errorf("%s: done %v with %d points acknowledged, want done with the %d handed on", id, done, points, len(rd.Rows[id]))
		}
	}
}

// readAlone runs a reader alone over targets from floor (ReadAlone).
func readAlone(src pipeline.Source, targets []pipeline.Target, o pipeline.EngineOptions, floor int64) *pipeline.Reading {
	return pipeline.ReadAlone(context.Background(), src, targets, o, floor, nil)
}

func TestReaderHandsOnCutFramesAndReadsTheirWindowsAgainInHalvesWithoutCounts(t *testing.T) {
	src, targets := pipelinetest.Fixture(3, 50, 1_700_000_000_000)
	rd := readAlone(src, targets, pipeline.EngineOptions{RowsPerRequest: 8, VariablesPerRequest: 2}, 0)
	// Every point reaches the loaders, and the points of cut frames more
	// than once: the reader never drops a row it was served.
	for _, tg := range targets {
		seen := map[int64]bool{}
		for _, ts := range rd.Rows[tg.Variable.ID] {
			seen[ts] = true
		}
		if len(seen) != 50 {
			t.Errorf("%s: %d distinct points handed on, want 50", tg.Variable.ID, len(seen))
		}
		if n := rd.Reloaded[tg.Variable.ID]; n != int64(len(rd.Rows[tg.Variable.ID])-50) {
			t.Errorf("%s: %d rows noted as reloaded, but %d were handed on twice", tg.Variable.ID, n, len(rd.Rows[tg.Variable.ID])-50)
		}
	}
	if rd.Splits == 0 || rd.Counts != 0 {
		t.Errorf("%d splits and %d counts, want splits and no count from a source that cannot count", rd.Splits, rd.Counts)
	}
	checkDone(t, rd, targets)
}

func TestReaderProvesFramesOfTheLimitWholeWithOneCountEach(t *testing.T) {
	src, targets := pipelinetest.Fixture(4, 20, 1_700_000_000_000)
	src.Cut = pipelinetest.CutAnyShuffled
	rd := readAlone(src, targets, pipeline.EngineOptions{RowsPerRequest: 20, VariablesPerRequest: 2, Counts: src}, 0)
	if rd.Requests != 2 || rd.Counts != 2 || rd.Splits != 0 {
		t.Errorf("%d requests, %d counts, %d splits; want 2, 2, 0", rd.Requests, rd.Counts, rd.Splits)
	}
	checkReadOnce(t, rd, src, targetIDs(targets), 0)
	checkDone(t, rd, targets)
}

// A limit that keeps the newest points leaves [min, end] proven by a
// count: only what lies below is read again, and no row is handed on
// twice.
func TestReaderReadsAgainOnlyWhatACountLeftUnproven(t *testing.T) {
	src, targets := pipelinetest.Fixture(2, 100, 1_700_000_000_000)
	src.Cut = pipelinetest.CutNewestDesc
	rd := readAlone(src, targets, pipeline.EngineOptions{RowsPerRequest: 30, VariablesPerRequest: 1, Counts: src}, 0)
	checkReadOnce(t, rd, src, targetIDs(targets), 0)
	for _, tg := range targets {
		if n := rd.Reloaded[tg.Variable.ID]; n != 0 {
			t.Errorf("%s: %d rows noted as reloaded, want none", tg.Variable.ID, n)
		}
	}
	checkDone(t, rd, targets)
}

func TestReaderConfinesAFailureToTheVariableThatCausedIt(t *testing.T) {
	for _, tie := range []bool{true, false} {
		t.Run(fmt.Sprintf("tied=%v", tie), func(t *testing.T) {
			src, targets := pipelinetest.Fixture(4, 5, 1_700_000_000_000)
			failOn(src, tie, "v002")
			rd := readAlone(src, targets, pipeline.EngineOptions{VariablesPerRequest: 4}, 0)
			res := rd.Result
			if len(res.Failed) != 1 || res.Failed[0].Variable.ID != "v002" {
				t.Fatalf("failed %v, want v002 alone", res.Failed)
			}
			// Tied: the request, then the three others. Scoped: the
			// request, its halves, the failing half's halves.
			want := map[bool]int{true: 2, false: 5}[tie]
			if src.Requests() != want {
				t.Errorf("%d requests, want %d", src.Requests(), want)
			}
			checkReadOnce(t, rd, src, []string{"v000", "v001", "v003"}, 0)
			if len(rd.Rows["v002"]) != 0 || rd.Requests != int64(want) {
				t.Errorf("v002: %d rows handed on; %d requests counted", len(rd.Rows["v002"]), rd.Requests)
			}
		})
	}
}

func TestReaderDiscardsTheRowsOfAResponseCutMidStreamAndReadsItAgain(t *testing.T) {
	src, targets := pipelinetest.Fixture(2, 10, 1_700_000_000_000)
	// The first response's first frame is served whole, then the body is
	// cut as mid-stream.
	var once sync.Once
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return serve(sink)
		}
		if err := pipelinetest.ServeFrame(sink, 0, src.Frame(req.VariableIDs[0], req)); err != nil {
			return err
		}
		return retryErr{}
	}
	rd := readAlone(src, targets, pipeline.EngineOptions{VariablesPerRequest: 2, RetryWait: time.Millisecond}, 0)
	if rd.Requests != 2 {
		t.Errorf("%d requests, want 2", rd.Requests)
	}
	// The first frame's rows were in the fetcher's chunk when the body
	// was cut: they are dropped with their span, and read again.
	checkReadOnce(t, rd, src, []string{"v000", "v001"}, 0)
	checkDone(t, rd, targets)
}

func TestReaderMovesTheFloorToWhereTheServiceAcceptsRanges(t *testing.T) {
	const start = 1_700_000_000_000
	src, targets := pipelinetest.Fixture(2, 100, start)
	src.Floor = start + 30_000 // the account keeps less than configured
	margin := time.Second
	rd := readAlone(src, targets, pipeline.EngineOptions{VariablesPerRequest: 2, FloorMargin: margin}, start)
	moved := rd.FloorMovedTo
	if lo, hi := src.Floor+margin.Milliseconds(), src.Floor+pipeline.FloorResolution+margin.Milliseconds(); moved < lo || moved > hi {
		t.Fatalf("floor moved to %d, want within [%d, %d]", moved, lo, hi)
	}
	if probes := rd.Probes; probes == 0 || probes+rd.Requests != int64(src.Requests()) {
		t.Errorf("%d probes and %d requests counted, the source served %d", probes, rd.Requests, src.Requests())
	}
	checkReadOnce(t, rd, src, targetIDs(targets), moved)
	checkDone(t, rd, targets)
	// The committer is told the window as read: from the moved floor.
	for _, tg := range targets {
		if start := rd.Told[tg.Variable.ID]; start != moved {
			t.Errorf("%s: the committer was told the window starts at %d, want %d", tg.Variable.ID, start, moved)
		}
	}
}

func TestReaderFailsTheRequestsLeftWhenItsContextIsCancelled(t *testing.T) {
	src, targets := pipelinetest.Fixture(3, 5, 1_700_000_000_000)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("SIGTERM")
	cancel(cause)
	rd := pipeline.ReadAlone(ctx, src, targets, pipeline.EngineOptions{VariablesPerRequest: 1, MaxInFlight: 1}, 0, func(b *pipeline.Batch) {
		t.Errorf("a chunk of %d rows was handed on after the cancel", b.Len())
	})
	if src.Requests() != 0 {
		t.Errorf("%d requests after the cancel, want none", src.Requests())
	}
	res := rd.Result
	if res.Completed != 0 {
		t.Errorf("%d targets completed, want none", res.Completed)
	}
	for _, f := range res.Failed {
		if !errors.Is(f.Err, cause) {
			t.Errorf("%s failed with %v, want the cancel's cause", f.Variable.ID, f.Err)
		}
	}
}
