package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// The reader on its own: splitting, proofs and the floor against fake
// sources (engine_test.go's memSource, density_test.go's orderSource,
// nopointlost_test.go's faultySource), with a drain in place of the
// loaders that takes each chunk's rows and acknowledges its spans to the
// committer at once. What the reader tells the committer is read back
// from it.

// drained is what the drain took from the reader.
type drained struct {
	mu   sync.Mutex
	rows map[string][]int64
}

// readAlone runs a reader over targets from floor and returns the rows it
// handed on, the reader and the committer it told.
func readAlone(t *testing.T, src Source, targets []Target, o EngineOptions, floor int64) (*drained, *reader, *committer) {
	t.Helper()
	e := NewEngine(src, nil, nil, o, nil, nil, nil)
	c := newCommitter(e, targets)
	out := newChunks(1)
	r := newReader(context.Background(), e, targets, floor, out, c)
	d := &drained{rows: map[string][]int64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range out.full {
			d.mu.Lock()
			for i := range b.Len() {
				d.rows[b.VariableID[i]] = append(d.rows[b.VariableID[i]], b.TsMs[i])
			}
			d.mu.Unlock()
			c.ack(b.Spans, nil)
			out.recycle(b)
		}
	}()
	r.run(context.Background())
	<-done
	return d, r, c
}

// checkReadOnce fails unless the reader handed on each of the source's
// points of ids from floor on exactly once.
func checkReadOnce(t *testing.T, d *drained, src *memSource, ids []string, floor int64) {
	t.Helper()
	for _, id := range ids {
		var want []int64
		for _, p := range src.points[id] {
			if p.TsMs >= floor {
				want = append(want, p.TsMs)
			}
		}
		got := slices.Clone(d.rows[id])
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: handed on %d rows, want each of the source's %d once (first %v, want %v)", id, len(got), len(want), got[:min(len(got), 5)], want[:min(len(want), 5)])
		}
	}
}

// checkDone fails unless the committer has every target done, with as many
// points acknowledged as the reader handed on.
func checkDone(t *testing.T, d *drained, c *committer, targets []Target) {
	t.Helper()
	for _, tg := range targets {
		points, done := c.loaded(tg.Variable.ID)
		if !done || points != int64(len(d.rows[tg.Variable.ID])) {
			t.Errorf("%s: done %v with %d points acknowledged, want done with the %d handed on", tg.Variable.ID, done, points, len(d.rows[tg.Variable.ID]))
		}
	}
}

func TestReaderHandsOnCutFramesAndReadsTheirWindowsAgainInHalvesWithoutCounts(t *testing.T) {
	src, targets := fixture(3, 50, 1_700_000_000_000)
	d, r, c := readAlone(t, src, targets, EngineOptions{RowsPerRequest: 8, VariablesPerRequest: 2}, 0)
	// Every point reaches the loaders, and the points of cut frames more
	// than once: the reader never drops a row it was served.
	for _, tg := range targets {
		seen := map[int64]bool{}
		for _, ts := range d.rows[tg.Variable.ID] {
			seen[ts] = true
		}
		if len(seen) != 50 {
			t.Errorf("%s: %d distinct points handed on, want 50", tg.Variable.ID, len(seen))
		}
		if ts := r.byID[tg.Variable.ID]; ts.reloaded != int64(len(d.rows[tg.Variable.ID])-50) {
			t.Errorf("%s: %d rows noted as reloaded, but %d were handed on twice", tg.Variable.ID, ts.reloaded, len(d.rows[tg.Variable.ID])-50)
		}
	}
	if r.n.splits.Load() == 0 || r.proofs.asked.Load() != 0 {
		t.Errorf("%d splits and %d counts, want splits and no count from a source that cannot count", r.n.splits.Load(), r.proofs.asked.Load())
	}
	checkDone(t, d, c, targets)
}

func TestReaderProvesFramesOfTheLimitWholeWithOneCountEach(t *testing.T) {
	mem, targets := fixture(4, 20, 1_700_000_000_000)
	src := &orderSource{memSource: mem, mode: keepAny}
	d, r, c := readAlone(t, src, targets, EngineOptions{RowsPerRequest: 20, VariablesPerRequest: 2, Counts: src}, 0)
	if r.n.requests.Load() != 2 || r.proofs.asked.Load() != 2 || r.n.splits.Load() != 0 {
		t.Errorf("%d requests, %d counts, %d splits; want 2, 2, 0", r.n.requests.Load(), r.proofs.asked.Load(), r.n.splits.Load())
	}
	checkReadOnce(t, d, mem, ids(targets), 0)
	checkDone(t, d, c, targets)
}

// A limit that keeps the newest points leaves [min, end] proven by a
// count: only what lies below is read again, and no row is handed on
// twice.
func TestReaderReadsAgainOnlyWhatACountLeftUnproven(t *testing.T) {
	mem, targets := fixture(2, 100, 1_700_000_000_000)
	src := &orderSource{memSource: mem, mode: keepNewestDesc}
	d, r, c := readAlone(t, src, targets, EngineOptions{RowsPerRequest: 30, VariablesPerRequest: 1, Counts: src}, 0)
	checkReadOnce(t, d, mem, ids(targets), 0)
	for _, tg := range targets {
		if n := r.byID[tg.Variable.ID].reloaded; n != 0 {
			t.Errorf("%s: %d rows noted as reloaded, want none", tg.Variable.ID, n)
		}
	}
	checkDone(t, d, c, targets)
}

func TestReaderConfinesAFailureToTheVariableThatCausedIt(t *testing.T) {
	for _, tie := range []bool{true, false} {
		t.Run(fmt.Sprintf("tied=%v", tie), func(t *testing.T) {
			mem, targets := fixture(4, 5, 1_700_000_000_000)
			src := &faultySource{memSource: mem, bad: map[string]bool{"v002": true}, tie: tie}
			d, r, c := readAlone(t, src, targets, EngineOptions{VariablesPerRequest: 4}, 0)
			var res RunResult
			c.result(&res)
			if len(res.Failed) != 1 || res.Failed[0].Variable.ID != "v002" {
				t.Fatalf("failed %v, want v002 alone", res.Failed)
			}
			// Tied: the request, then the three others. Scoped: the
			// request, its halves, the failing half's halves.
			want := map[bool]int{true: 2, false: 5}[tie]
			if src.requests != want {
				t.Errorf("%d requests, want %d", src.requests, want)
			}
			checkReadOnce(t, d, mem, []string{"v000", "v001", "v003"}, 0)
			if len(d.rows["v002"]) != 0 || r.n.requests.Load() != int64(want) {
				t.Errorf("v002: %d rows handed on; %d requests counted", len(d.rows["v002"]), r.n.requests.Load())
			}
		})
	}
}

// cutAfterFirstFrame serves the first frame of its first response whole,
// then fails as a body cut mid-stream does.
type cutAfterFirstFrame struct {
	*memSource
	cut bool
}

func (s *cutAfterFirstFrame) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	s.mu.Lock()
	first := !s.cut
	s.cut = true
	s.mu.Unlock()
	if !first {
		return s.memSource.Series(ctx, req, sink)
	}
	if err := serveFrame(sink, 0, inWindow(s.points[req.VariableIDs[0]], req.Start, req.End)); err != nil {
		return err
	}
	return retryErr{}
}

func TestReaderDiscardsTheRowsOfAResponseCutMidStreamAndReadsItAgain(t *testing.T) {
	mem, targets := fixture(2, 10, 1_700_000_000_000)
	src := &cutAfterFirstFrame{memSource: mem}
	d, r, c := readAlone(t, src, targets, EngineOptions{VariablesPerRequest: 2, RetryWait: time.Millisecond}, 0)
	if r.n.requests.Load() != 2 {
		t.Errorf("%d requests, want 2", r.n.requests.Load())
	}
	// The first frame's rows were in the fetcher's chunk when the body
	// was cut: they are dropped with their span, and read again.
	checkReadOnce(t, d, mem, []string{"v000", "v001"}, 0)
	checkDone(t, d, c, targets)
}

func TestReaderMovesTheFloorToWhereTheServiceAcceptsRanges(t *testing.T) {
	const start = 1_700_000_000_000
	src, targets := fixture(2, 100, start)
	src.floor = start + 30_000 // the account keeps less than configured
	margin := time.Second
	d, r, c := readAlone(t, src, targets, EngineOptions{VariablesPerRequest: 2, FloorMargin: margin}, start)
	moved := r.floor.movedTo()
	if lo, hi := src.floor+margin.Milliseconds(), src.floor+floorResolution+margin.Milliseconds(); moved < lo || moved > hi {
		t.Fatalf("floor moved to %d, want within [%d, %d]", moved, lo, hi)
	}
	if probes := r.floor.probes.Load(); probes == 0 || probes+r.n.requests.Load() != int64(src.requests) {
		t.Errorf("%d probes and %d requests counted, the source served %d", probes, r.n.requests.Load(), src.requests)
	}
	checkReadOnce(t, d, src, ids(targets), moved)
	checkDone(t, d, c, targets)
	// The committer is told the window as read: from the moved floor.
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tg := range targets {
		if h := c.held[tg.Variable.ID]; h.told.start != moved {
			t.Errorf("%s: the committer was told the window starts at %d, want %d", tg.Variable.ID, h.told.start, moved)
		}
	}
}

func TestReaderFailsTheRequestsLeftWhenItsContextIsCancelled(t *testing.T) {
	src, targets := fixture(3, 5, 1_700_000_000_000)
	e := NewEngine(src, nil, nil, EngineOptions{VariablesPerRequest: 1, MaxInFlight: 1}, nil, nil, nil)
	c := newCommitter(e, targets)
	out := newChunks(8)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("SIGTERM")
	cancel(cause)
	r := newReader(ctx, e, targets, 0, out, c)
	r.run(ctx)
	for b := range out.full {
		t.Errorf("a chunk of %d rows was handed on after the cancel", b.Len())
	}
	if src.requests != 0 {
		t.Errorf("%d requests after the cancel, want none", src.requests)
	}
	var res RunResult
	c.result(&res)
	if res.Completed != 0 {
		t.Errorf("%d targets completed, want none", res.Completed)
	}
	for _, f := range res.Failed {
		if !errors.Is(f.Err, cause) {
			t.Errorf("%s failed with %v, want the cancel's cause", f.Variable.ID, f.Err)
		}
	}
}
