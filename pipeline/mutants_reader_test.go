package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// Tests that kill mutants make mutate found alive in reader.go: how long
// rows wait in a fetcher's chunk, how often a request cut mid-stream is
// tried, and which failures are confined to one variable
// (mutants_shrink_test.go: what a response too large becomes).

// pointSource serves one point a variable, at its window's start (1000),
// of the n variables of pointTargets.
func pointSource(n int) *pipelinetest.Source {
	src := &pipelinetest.Source{}
	for _, tg := range pointTargets(n) {
		src.Add(tg.Variable.ID, pipeline.Point{TsMs: tg.Start})
	}
	return src
}

// pointTargets are n variables' windows [1000, 9000].
func pointTargets(n int) []pipeline.Target {
	var ts []pipeline.Target
	for i := range n {
		ts = append(ts, pipeline.Target{Variable: pipeline.Variable{ID: fmt.Sprintf("v%d", i)}, Start: 1000, End: 9000, From: 1000})
	}
	return ts
}

func TestAFetcherHandsOnItsChunkOnceItsFirstRowsAreBatchAgeOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A request a second, one row each, BatchAge 2 s: the chunk begun
		// with the first request is handed on after the second, at 2 s
		// exactly; the next begins with the third.
		src := pointSource(5)
		src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
			time.Sleep(time.Second)
			return serve(sink)
		}
		// The writer notes the rows of each chunk appended.
		var mu sync.Mutex
		var rows []int
		w := &pipelinetest.Writer{OnAppend: func(c *pipeline.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			rows = append(rows, c.Len())
			return nil
		}}
		res := pipeline.NewEngine(src, w, nil, pipeline.EngineOptions{VariablesPerRequest: 1, MaxInFlight: 1, InsertWorkers: 1, BatchAge: 2 * time.Second}, nil, nil, nil).
			Run(context.Background(), pointTargets(5))
		if len(res.Failed) != 0 || res.Completed != 5 {
			t.Fatalf("completed %d, failed %v", res.Completed, res.Failed)
		}
		if want := []int{2, 2, 1}; !slices.Equal(rows, want) {
			t.Errorf("chunks of %v rows, want %v", rows, want)
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
		src := pointSource(1)
		var n atomic.Int64
		src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
			if n.Add(1) <= 6 {
				_ = sink.Point(0, pipeline.Point{TsMs: req.Start})
				return cutErr{}
			}
			return serve(sink)
		}
		res := pipeline.NewEngine(src, &pipelinetest.Writer{}, nil, pipeline.EngineOptions{MaxInFlight: 1, RequestAttempts: 3, RetryWait: time.Millisecond}, nil, nil, nil).
			Run(context.Background(), pointTargets(1))
		if len(res.Failed) != 1 || src.Requests() != 3 {
			t.Errorf("failed %v after %d requests, want the variable failed after 3", res.Failed, src.Requests())
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
			src := pointSource(3)
			src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
				if len(req.VariableIDs) == 3 {
					return indexErr{c.index}
				}
				return serve(sink)
			}
			res := pipeline.NewEngine(src, &pipelinetest.Writer{}, nil, pipeline.EngineOptions{VariablesPerRequest: 3, MaxInFlight: 1}, nil, nil, nil).
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
