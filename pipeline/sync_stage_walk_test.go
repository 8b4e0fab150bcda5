package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"

	"github.com/prometheus/client_golang/prometheus"
)

// histogramSum is the sum of the histogram name that reg gathers, of
// stage stage.
func histogramSum(t *testing.T, reg *prometheus.Registry, name, stage string) float64 {
	t.Helper()
	return metric(t, reg, name, stage).GetHistogram().GetSampleSum()
}

// The walk stage's time is the walk's own, without what it handed on to
// the other stages (cycleWalk.inSink), the last chunk included: it is
// flushed after Walk returns, outside the sink, and counted in its own
// stages only, or with a fleet of one chunk (any fleet under 20 000
// variables) fleetsync_stage_duration_seconds{stage="walk"} would be the
// whole move.
func TestTheWalkStageExcludesTheLastChunksMove(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	src, _ := pipelinetest.Fixture(3, 10, now.UnixMilli()-10*60_000)
	// The move is slow, the walk instant.
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
		time.Sleep(100 * time.Millisecond)
		return serve(sink)
	}
	reg := prometheus.NewRegistry()
	m, err := pipeline.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := pipeline.NewSyncer(src, &pipelinetest.Writer{}, pipeline.Stages{}, &pipelinetest.Store{}, pipeline.SyncOptions{
		Engine: pipeline.EngineOptions{RetryWait: time.Millisecond, VariablesPerRequest: 1}, Retention: 30 * 24 * time.Hour, Lookback: time.Hour,
		Now: func() time.Time { return now },
	}, nil, m)
	if _, err := s.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	const name = "fleetsync_stage_duration_seconds"
	walk, move := histogramSum(t, reg, name, pipeline.StageWalk), histogramSum(t, reg, name, pipeline.StageMove)
	if move < 0.09 || walk > 0.05 {
		t.Fatalf("stage durations: walk %.3fs, move %.3fs; the walk lists 3 variables from memory, the move sleeps 0.1s a request: want the move near 0.1s and the walk near 0", walk, move)
	}
}
