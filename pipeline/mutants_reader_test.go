package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Tests that kill mutants make mutate found alive in reader.go: how long
// rows wait in a fetcher's chunk, how often a request cut mid-stream is
// tried, which failures are confined to one variable, and what a response
// too large becomes.

// pointSource serves one point a variable, at its window's start, after
// took of the clock, and fails as fail says (nil: never).
type pointSource struct {
	mu       sync.Mutex
	took     time.Duration
	requests int
	fail     func(n int, req SeriesRequest) (touch bool, err error)
}

func (*pointSource) Walk(context.Context, Scope, WalkSink) error { return nil }

func (s *pointSource) Series(_ context.Context, req SeriesRequest, sink FrameSink) error {
	s.mu.Lock()
	s.requests++
	n := s.requests
	s.mu.Unlock()
	time.Sleep(s.took)
	if s.fail != nil {
		if touch, err := s.fail(n, req); err != nil {
			if touch {
				_ = sink.Point(0, Point{TsMs: req.Start})
			}
			return err
		}
	}
	for i := range req.VariableIDs {
		if err := sink.Point(i, Point{TsMs: req.Start}); err != nil {
			return err
		}
		if err := sink.EndFrame(i, 1); err != nil {
			return err
		}
	}
	return nil
}

// appendLog is a Writer that notes the rows of each chunk appended.
type appendLog struct {
	mu   sync.Mutex
	rows []int
}

func (w *appendLog) Begin(context.Context) (Insert, error) { return appendInsert{w}, nil }

type appendInsert struct{ w *appendLog }

func (in appendInsert) Append(c *Batch) error {
	in.w.mu.Lock()
	defer in.w.mu.Unlock()
	in.w.rows = append(in.w.rows, c.Len())
	return nil
}
func (appendInsert) Commit() error { return nil }
func (appendInsert) Abort()        {}

// pointTargets are n variables' windows [1000, 9000].
func pointTargets(n int) []Target {
	var ts []Target
	for i := range n {
		ts = append(ts, Target{Variable: Variable{ID: fmt.Sprintf("v%d", i)}, Start: 1000, End: 9000, From: 1000})
	}
	return ts
}

func TestAFetcherHandsOnItsChunkOnceItsFirstRowsAreBatchAgeOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A request a second, one row each, BatchAge 2 s: the chunk begun
		// with the first request is handed on after the second, at 2 s
		// exactly; the next begins with the third.
		src := &pointSource{took: time.Second}
		w := &appendLog{}
		res := NewEngine(src, w, nil, EngineOptions{VariablesPerRequest: 1, MaxInFlight: 1, InsertWorkers: 1, BatchAge: 2 * time.Second}, nil, nil, nil).
			Run(context.Background(), pointTargets(5))
		if len(res.Failed) != 0 || res.Completed != 5 {
			t.Fatalf("completed %d, failed %v", res.Completed, res.Failed)
		}
		if want := []int{2, 2, 1}; !slices.Equal(w.rows, want) {
			t.Errorf("chunks of %v rows, want %v", w.rows, want)
		}
	})
}

// cutErr is a response cut mid-stream: retryable.
type cutErr struct{}

func (cutErr) Error() string   { return "unexpected EOF" }
func (cutErr) Retryable() bool { return true }

func TestARequestCutMidStreamIsTriedRequestAttemptsTimesThenFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Cut the first 6 times: with 3 attempts the variable fails after
		// the third.
		src := &pointSource{fail: func(n int, _ SeriesRequest) (bool, error) {
			if n <= 6 {
				return true, cutErr{}
			}
			return false, nil
		}}
		res := NewEngine(src, &appendLog{}, nil, EngineOptions{MaxInFlight: 1, RequestAttempts: 3, RetryWait: time.Millisecond}, nil, nil, nil).
			Run(context.Background(), pointTargets(1))
		if len(res.Failed) != 1 || src.requests != 3 {
			t.Errorf("failed %v after %d requests, want the variable failed after 3", res.Failed, src.requests)
		}
	})
}

// indexErr ties a failure to the variable at index i of the request.
type indexErr struct{ i int }

func (e indexErr) Error() string      { return fmt.Sprintf("frame %d: bad value", e.i) }
func (e indexErr) VariableIndex() int { return e.i }

func TestAFailureTiedToAVariableIsConfinedOnlyWhenTheIndexNamesOne(t *testing.T) {
	cases := []struct {
		name   string
		index  int
		failed []string
	}{
		{"the first variable", 0, []string{"v0"}},
		{"the last variable", 2, []string{"v2"}},
		{"an index past the request's variables: the whole request", 3, []string{"v0", "v1", "v2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := &pointSource{fail: func(_ int, req SeriesRequest) (bool, error) {
				if len(req.VariableIDs) == 3 {
					return false, indexErr{c.index}
				}
				return false, nil
			}}
			res := NewEngine(src, &appendLog{}, nil, EngineOptions{VariablesPerRequest: 3, MaxInFlight: 1}, nil, nil, nil).
				Run(context.Background(), pointTargets(3))
			var failed []string
			for _, f := range res.Failed {
				failed = append(failed, f.Variable.ID)
			}
			slices.Sort(failed)
			if !slices.Equal(failed, c.failed) || res.Completed != 3-len(c.failed) {
				t.Errorf("failed %v, completed %d; want %v failed, the others completed", failed, res.Completed, c.failed)
			}
		})
	}
}

// shrinkReader is a reader of targets whose one queued request (all of
// them, VariablesPerRequest) has been popped, as a fetcher holds it.
func shrinkReader(t *testing.T, log *zap.Logger, targets []Target) (*reader, *request) {
	t.Helper()
	ctx := context.Background()
	e := NewEngine(nil, nil, nil, EngineOptions{VariablesPerRequest: len(targets)}, nil, log, nil)
	r := newReader(ctx, e, targets, 0, newChunks(4), newCommitter(e, targets))
	req := r.q.pop(ctx)
	if req == nil || len(req.targets) != len(targets) {
		t.Fatalf("popped %+v, want one request for the %d targets", req, len(targets))
	}
	return r, req
}

func TestShrinkReadsAnOpenVariableClosedAndNotesTheFutureAfterItsEnd(t *testing.T) {
	targets := pointTargets(1)
	targets[0].ReadFuture = true
	r, req := shrinkReader(t, nil, targets)
	if !r.shrink(req, errors.New("too large")) {
		t.Fatal("shrink refused an open request of one variable")
	}
	if got := r.byID["v0"].futureMs; got != 9001 {
		t.Errorf("future %d, want 9001: the points after the window's end are left unread", got)
	}
	next := r.q.pop(context.Background())
	if next == nil || next.open || next.start != 1000 || next.end != 9000 {
		t.Errorf("next read %+v, want [1000, 9000] closed", next)
	}
}

func TestTheVariablesPerRequestCapOnlyGoesDownAndIsLoggedWhenItDoes(t *testing.T) {
	cases := []struct {
		name      string
		cap, want int64
		logged    int
	}{
		{"no cap yet: half of the request's variables", 0, 4, 1},
		{"a lower cap stays", 2, 2, 0},
		{"the same cap stays, unlogged", 4, 4, 0},
		{"a higher cap comes down", 6, 4, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			r, req := shrinkReader(t, zap.New(core), pointTargets(8))
			r.varCap.Store(c.cap)
			// Both halves of an earlier split were too large: this is the second.
			req.halves = &splitHalves{}
			req.halves.tooLarge.Store(1)
			r.shrink(req, errors.New("too large"))
			if got := r.varCap.Load(); got != c.want {
				t.Errorf("cap %d, want %d", got, c.want)
			}
			if n := logs.FilterMessageSnippet("fewer variables per request").Len(); n != c.logged {
				t.Errorf("logged %d times, want %d", n, c.logged)
			}
		})
	}
}
