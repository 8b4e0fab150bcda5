package pipeline_test

// The defects the simulation (sim_test.go) found, each kept by a test of
// its own, named after the case.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

func msKey(start, end int64) string {
	return time.UnixMilli(start).String() + time.UnixMilli(end).String()
}

// The loss of issue 23: in one request, frame a is proven by the first
// count ([111, 300], newest first) and frame b only by the second
// ([111, 119]); the re-reads of both were planned from a's window, so b's
// points 120..199 were never read and its mark moved to 200.
func TestRemainderOfFramesProvenByDifferentCountsIsPlannedFromEachFramesOwnWindow(t *testing.T) {
	// The source serves frames newest first, keeping the newest `limit`
	// of a cut frame, except where script gives a frame's timestamps for
	// a variable and window: a cut the spec allows (any `limit` points).
	src := &pipelinetest.Source{Cut: pipelinetest.CutNewestDesc}
	script := map[string][]int64{} // "id start end" -> served timestamps
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, _ func(pipeline.FrameSink) error) error {
		for i, id := range req.VariableIDs {
			in := src.Frame(id, req)
			if ts, ok := script[id+" "+msKey(req.Start, req.End)]; ok {
				in = in[:0]
				for _, t := range slices.Backward(ts) {
					in = append(in, pipeline.Point{TsMs: t, Value: float64(t), Context: []byte("{}")})
				}
			}
			if err := pipelinetest.ServeFrame(sink, i, in); err != nil {
				return err
			}
		}
		return nil
	}
	for ts := int64(100); ts <= 119; ts++ {
		src.Add("a", pipeline.Point{TsMs: ts, Value: float64(ts), Context: []byte("{}")})
	}
	for ts := int64(100); ts <= 200; ts++ {
		src.Add("b", pipeline.Point{TsMs: ts, Value: float64(ts), Context: []byte("{}")})
	}
	script["b "+msKey(100, 300)] = []int64{111, 112, 113, 114, 115, 116, 117, 118, 119, 200}
	targets := []pipeline.Target{
		{Variable: pipeline.Variable{ID: "a"}, Start: 100, End: 300},
		{Variable: pipeline.Variable{ID: "b"}, Start: 100, End: 300},
	}
	for _, order := range [][]pipeline.Target{targets, {targets[1], targets[0]}} {
		st := &pipelinetest.Store{}
		w := &pipelinetest.Writer{}
		res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 10, VariablesPerRequest: 2, MaxInFlight: 1, Counts: src}, nil, nil, nil).Run(context.Background(), order)
		if len(res.Failed) != 0 {
			t.Fatalf("failed: %v", res.Failed)
		}
		pipelinetest.CheckLoaded(t, src, w, []string{"a", "b"})
	}
}

// A backfill that starts inside the lookback behind a mark does not move
// it: a late point may have landed behind the mark, below the backfill's
// start, after the mark was written, and only a read from the mark's
// lookback finds it. Moving the mark to the backfill's newest point put
// that point out of every later cycle's reach.
func TestBackfillMovesAMarkOnlyWhenItReadTheMarksLookback(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	const hour = int64(3_600_000)
	mark := now.UnixMilli() - 5*hour
	pt := func(ts int64) pipeline.Point {
		return pipeline.Point{TsMs: ts, Value: float64(ts % 1000), Context: []byte("{}")}
	}
	src := &pipelinetest.Source{}
	src.Add("v", pt(mark-2*hour), pt(mark))
	// Written after the mark was committed, 30 minutes behind it; then
	// points up to an hour ago.
	src.Add("v", pt(mark-hour/2))
	for ts := mark + hour; ts <= now.UnixMilli()-hour; ts += hour / 4 {
		src.Add("v", pt(ts))
	}
	st := pipelinetest.NewStore(pipeline.Mark{VariableID: "v", HwmMs: mark, CheckedMs: mark})
	// The points the mark covers were loaded when it was written.
	w := &pipelinetest.Writer{}
	for _, ts := range []int64{mark - 2*hour, mark} {
		w.Add(pipeline.Row{VariableID: "v", TsMs: ts, Value: pt(ts).Value, Context: "{}"})
	}
	s := pipeline.NewSyncer(src, w, pipeline.Stages{}, st, pipeline.SyncOptions{
		Engine: pipeline.EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour, Lookback: time.Hour,
		Now: func() time.Time { return now },
	}, nil, nil)
	// From 10 minutes behind the mark to now: it joins the mark but not
	// its lookback.
	if _, err := s.Backfill(context.Background(), mark-hour/6, now.UnixMilli(), nil); err != nil {
		t.Fatal(err)
	}
	if got := st.Marks()["v"].HwmMs; got != mark {
		t.Fatalf("the backfill moved the mark from %d to %d without reading the lookback behind it", mark, got)
	}
	if _, err := s.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	pipelinetest.CheckLoaded(t, src, w, []string{"v"})
	// From the mark's lookback on, it moves the mark.
	st.Set(pipeline.Mark{VariableID: "v", HwmMs: mark})
	if _, err := s.Backfill(context.Background(), mark-hour, now.UnixMilli(), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := st.Marks()["v"].HwmMs, lastTs(src.Points("v")); got != want {
		t.Fatalf("a backfill from the mark's lookback left the mark at %d, want %d", got, want)
	}
}

// More points stamped after a cycle's end than the limit (a device clock
// hours ahead, a fast variable during a slow cycle), under a limit that
// keeps the oldest points: the proven window reached past the end, the
// remainder read [end, end] open again, the same frame came back, and the
// cycle never ended (found by review: 178k requests in 2 s). Now nothing
// past such a window is read: it is all ahead of the cycle, and its
// earliest point is noted for the cycle that ends after it.
func TestCutFramesOfPointsAheadOfTheCycleAreNotReadAgainForEver(t *testing.T) {
	for _, cut := range []pipelinetest.Cut{pipelinetest.CutOldestAsc, pipelinetest.CutNewestDesc, pipelinetest.CutNewestAsc, pipelinetest.CutNewestShuffled} {
		t.Run(cut.String(), func(t *testing.T) {
			const base = int64(1_700_000_000_000)
			src := &pipelinetest.Source{Cut: cut}
			end := base + 100_000
			for p := range 50 {
				src.Add("v0", pipeline.Point{TsMs: base + int64(p)*1000, Value: 1, Context: []byte("{}")})
			}
			for p := range 250 {
				src.Add("v0", pipeline.Point{TsMs: end + 1 + int64(p)*10, Value: 2, Context: []byte("{}")})
			}
			targets := []pipeline.Target{{Variable: pipeline.Variable{ID: "v0"}, Start: base, End: end, ReadFuture: true}}
			w := &pipelinetest.Writer{}
			st := &pipelinetest.Store{}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 1, MaxInFlight: 1, Counts: src}, nil, nil, nil).Run(ctx, targets)
			if len(res.Failed) != 0 || src.Requests() > 20 {
				t.Fatalf("%d raw-series requests and %d counts for 50 points and 250 ahead (failed: %v)", src.Requests(), src.Counts(), res.Failed)
			}
			if n := len(w.Rows("v0")); n != 50 {
				t.Errorf("loaded %d points, want the 50 up to the end", n)
			}
			if m := st.Marks()["v0"]; m.FutureMs <= end || m.FutureMs > end+1 || m.HwmMs > end {
				t.Errorf("mark %+v: want FutureMs in (%d, %d], hwm not past %d", m, end, end+1, end)
			}
		})
	}
}
