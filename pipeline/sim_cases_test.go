package pipeline

// The defects the simulation (sim_test.go) found, each kept by a test of
// its own, named after the case.

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// scriptedSource serves memSource's points newest first, keeping the newest
// `limit` of a cut frame, except where script gives a frame's timestamps
// for a variable and window: a cut the spec allows (any `limit` points).
type scriptedSource struct {
	*memSource
	script map[string][]int64 // "id start end" -> served timestamps
}

func (s *scriptedSource) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	for i, id := range req.VariableIDs {
		in := inWindow(s.points[id], req.Start, req.End)
		if ts, ok := s.script[id+" "+msKey(req.Start, req.End)]; ok {
			in = in[:0]
			for _, t := range ts {
				in = append(in, Point{TsMs: t, Value: float64(t), Context: []byte("{}")})
			}
		} else if req.Limit > 0 && len(in) > req.Limit {
			in = in[len(in)-req.Limit:]
		}
		slices.Reverse(in)
		if err := serveFrame(sink, i, in); err != nil {
			return err
		}
	}
	return nil
}

func (s *scriptedSource) Count(_ context.Context, ids []string, start, end int64) ([]int64, error) {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(len(inWindow(s.points[id], start, end)))
	}
	return out, nil
}

func msKey(start, end int64) string {
	return time.UnixMilli(start).String() + time.UnixMilli(end).String()
}

// The loss of issue 23: in one request, frame a is proven by the first
// count ([111, 300], newest first) and frame b only by the second
// ([111, 119]); the re-reads of both were planned from a's window, so b's
// points 120..199 were never read and its mark moved to 200.
func TestRemainderOfFramesProvenByDifferentCountsIsPlannedFromEachFramesOwnWindow(t *testing.T) {
	src := &scriptedSource{memSource: &memSource{points: map[string][]Point{}}, script: map[string][]int64{}}
	for ts := int64(100); ts <= 119; ts++ {
		src.points["a"] = append(src.points["a"], Point{TsMs: ts, Value: float64(ts), Context: []byte("{}")})
	}
	for ts := int64(100); ts <= 200; ts++ {
		src.points["b"] = append(src.points["b"], Point{TsMs: ts, Value: float64(ts), Context: []byte("{}")})
	}
	src.script["b "+msKey(100, 300)] = []int64{111, 112, 113, 114, 115, 116, 117, 118, 119, 200}
	targets := []Target{
		{Variable: Variable{ID: "a"}, Start: 100, End: 300},
		{Variable: Variable{ID: "b"}, Start: 100, End: 300},
	}
	for _, order := range [][]Target{targets, {targets[1], targets[0]}} {
		st := &memStore{marks: map[string]Mark{}}
		w := &memWriter{rows: map[string]map[int64]Row{}}
		res := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 10, VariablesPerRequest: 2, MaxInFlight: 1, Counts: src}, nil, nil, nil).Run(context.Background(), order)
		if len(res.Failed) != 0 {
			t.Fatalf("failed: %v", res.Failed)
		}
		checkLoaded(t, src.memSource, w, []string{"a", "b"})
	}
}

// listingSource is a memSource whose walk lists its variables.
type listingSource struct{ *memSource }

func (s listingSource) Walk(ctx context.Context, _ Scope, sink WalkSink) error {
	var vars []Variable
	for id := range s.points {
		vars = append(vars, Variable{ID: id, DeviceID: "d"})
	}
	return sink.Variables(ctx, vars)
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
	pt := func(ts int64) Point { return Point{TsMs: ts, Value: float64(ts % 1000), Context: []byte("{}")} }
	mem := &memSource{points: map[string][]Point{"v": {pt(mark - 2*hour), pt(mark)}}}
	// Written after the mark was committed, 30 minutes behind it; then
	// points up to an hour ago.
	mem.points["v"] = append(mem.points["v"], pt(mark-hour/2))
	for ts := mark + hour; ts <= now.UnixMilli()-hour; ts += hour / 4 {
		mem.points["v"] = append(mem.points["v"], pt(ts))
	}
	slices.SortFunc(mem.points["v"], func(a, b Point) int { return cmp.Compare(a.TsMs, b.TsMs) })
	st := &memStore{marks: map[string]Mark{"v": {VariableID: "v", HwmMs: mark, CheckedMs: mark}}}
	// The points the mark covers were loaded when it was written.
	w := &memWriter{rows: map[string]map[int64]Row{}}
	loaded := &Batch{}
	for _, ts := range []int64{mark - 2*hour, mark} {
		loaded.Append(Row{VariableID: "v", TsMs: ts, Value: pt(ts).Value, Context: "{}"})
	}
	if err := w.Write(context.Background(), []*Batch{loaded}); err != nil {
		t.Fatal(err)
	}
	s := NewSyncer(listingSource{mem}, w, Stages{}, st, SyncOptions{
		Engine: EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour, Lookback: time.Hour,
		Now: func() time.Time { return now },
	}, nil, nil)
	// From 10 minutes behind the mark to now: it joins the mark but not
	// its lookback.
	if _, err := s.Backfill(context.Background(), mark-hour/6, now.UnixMilli(), nil); err != nil {
		t.Fatal(err)
	}
	if got := st.marks["v"].HwmMs; got != mark {
		t.Fatalf("the backfill moved the mark from %d to %d without reading the lookback behind it", mark, got)
	}
	if _, err := s.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkLoaded(t, mem, w, []string{"v"})
	// From the mark's lookback on, it moves the mark.
	st.marks["v"] = Mark{VariableID: "v", HwmMs: mark}
	if _, err := s.Backfill(context.Background(), mark-hour, now.UnixMilli(), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := st.marks["v"].HwmMs, mem.points["v"][len(mem.points["v"])-1].TsMs; got != want {
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
	for _, mode := range []truncation{keepOldestAsc, keepNewestDesc, keepNewestAsc, keepNewestShuffled} {
		t.Run(mode.String(), func(t *testing.T) {
			const base = int64(1_700_000_000_000)
			mem := &memSource{points: map[string][]Point{}, rng: rand.New(rand.NewPCG(1, 2))}
			end := base + 100_000
			for p := range 50 {
				mem.points["v0"] = append(mem.points["v0"], Point{TsMs: base + int64(p)*1000, Value: 1, Context: []byte("{}")})
			}
			for p := range 250 {
				mem.points["v0"] = append(mem.points["v0"], Point{TsMs: end + 1 + int64(p)*10, Value: 2, Context: []byte("{}")})
			}
			targets := []Target{{Variable: Variable{ID: "v0"}, Start: base, End: end, ReadFuture: true}}
			src := &orderSource{memSource: mem, mode: mode}
			w := &memWriter{rows: map[string]map[int64]Row{}}
			st := &memStore{marks: map[string]Mark{}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 1, MaxInFlight: 1, Counts: src}, nil, nil, nil).Run(ctx, targets)
			if len(res.Failed) != 0 || src.series > 20 {
				t.Fatalf("%d raw-series requests and %d counts for 50 points and 250 ahead (failed: %v)", src.series, src.counted, res.Failed)
			}
			if n := len(w.rows["v0"]); n != 50 {
				t.Errorf("loaded %d points, want the 50 up to the end", n)
			}
			if m := st.marks["v0"]; m.FutureMs <= end || m.FutureMs > end+1 || m.HwmMs > end {
				t.Errorf("mark %+v: want FutureMs in (%d, %d], hwm not past %d", m, end, end+1, end)
			}
		})
	}
}
