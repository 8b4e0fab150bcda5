package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// slowSeriesSource is a listingSource whose raw-series requests take a
// while: the move is slow, the walk instant.
type slowSeriesSource struct {
	listingSource
	delay time.Duration
}

func (s slowSeriesSource) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	time.Sleep(s.delay)
	return s.listingSource.Series(ctx, req, sink)
}

func histogramSum(t *testing.T, h prometheus.Observer) float64 {
	t.Helper()
	var m dto.Metric
	if err := h.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleSum()
}

// The walk stage's time is the walk's own, without what it handed on to
// the other stages (cycleWalk.inSink), the last chunk included: it is
// flushed after Walk returns, outside the sink, and counted in its own
// stages only, or with a fleet of one chunk (any fleet under 20 000
// variables) fleetsync_stage_duration_seconds{stage="walk"} would be the
// whole move.
func TestTheWalkStageExcludesTheLastChunksMove(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	mem, _ := fixture(3, 10, now.UnixMilli()-10*60_000)
	src := slowSeriesSource{listingSource{mem}, 100 * time.Millisecond}
	m, _ := NewMetrics(nil)
	s := NewSyncer(src, &memWriter{rows: map[string]map[int64]Row{}}, Stages{}, &memStore{marks: map[string]Mark{}}, SyncOptions{
		Engine: EngineOptions{RetryWait: time.Millisecond, VariablesPerRequest: 1}, Retention: 30 * 24 * time.Hour, Lookback: time.Hour,
		Now: func() time.Time { return now },
	}, nil, m)
	if _, err := s.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	walk, move := histogramSum(t, m.stageDuration.WithLabelValues(StageWalk)), histogramSum(t, m.stageDuration.WithLabelValues(StageMove))
	if move < 0.09 || walk > 0.05 {
		t.Fatalf("stage durations: walk %.3fs, move %.3fs; the walk lists 3 variables from memory, the move sleeps 0.1s a request: want the move near 0.1s and the walk near 0", walk, move)
	}
}
