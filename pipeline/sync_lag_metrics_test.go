package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metric returns the one metric of family name that reg gathers, with
// label stage=stage when stage is not empty.
func metric(t *testing.T, reg *prometheus.Registry, name, stage string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if stage == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "stage" && l.GetValue() == stage }) {
				return m
			}
		}
	}
	t.Fatalf("no metric %s (stage %q) gathered", name, stage)
	return nil
}

// gaugeValue is the value of the gauge name that reg gathers.
// meteredSyncer is a Syncer over src, an empty store and writer, whose
// clock reads *now and whose metrics are in the returned registry; chunk
// is its MoveChunk (0: the default).
func meteredSyncer(t *testing.T, src *pipelinetest.Source, now *time.Time, chunk int) (*pipeline.Syncer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := pipeline.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := pipeline.NewSyncer(src, &pipelinetest.Writer{}, pipeline.Stages{}, &pipelinetest.Store{}, pipeline.SyncOptions{
		Engine: pipeline.EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour,
		Lookback: time.Hour, LagThreshold: time.Minute, MoveChunk: chunk,
		Now: func() time.Time { return *now },
	}, nil, m)
	return s, reg
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return metric(t, reg, name, "").GetGauge().GetValue()
}

// A cycle whose walk fails measured no lag, or only part of it: it must
// not report that nothing lags. The gauges keep what the last complete
// cycle found, or fleetsync_variables_lagging and
// fleetsync_sync_lag_max_seconds would drop to 0 exactly when the source
// fails, and FleetsyncSyncLagHigh (for: 15m) would reset on every failing
// cycle.
func TestAFailedWalkLeavesTheLagGaugesAsTheyWere(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	src, _ := pipelinetest.Fixture(4, 20, now.UnixMilli()-20*60_000)
	ids := listActivity(src)
	// The walk can be made to fail before it hands anything (the service
	// down, a 503 on the first page).
	fail := false
	src.OnWalk = func(sink pipeline.WalkSink, walk func(pipeline.WalkSink) error) error {
		if fail {
			return errors.New("list devices: 503 Service Unavailable")
		}
		return walk(sink)
	}
	s, reg := meteredSyncer(t, src, &now, 0)
	if _, err := s.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A point is known to be missing (lastActivity past what the service
	// serves): the next cycle reports it lagging.
	now = now.Add(30 * time.Minute)
	setLastActivity(src, ids[0], now.UnixMilli()+10*60_000)
	sum, err := s.Cycle(context.Background())
	if err != nil || sum.Lagging != 1 {
		t.Fatalf("second cycle: %v, %d lagging; want 1", err, sum.Lagging)
	}
	lagging, lagMax := gaugeValue(t, reg, "fleetsync_variables_lagging"), gaugeValue(t, reg, "fleetsync_sync_lag_max_seconds")
	if lagging != 1 || lagMax <= 0 {
		t.Fatalf("after the second cycle: lagging %v, lag max %v", lagging, lagMax)
	}
	// The third cycle's walk fails at once: nothing was measured.
	fail = true
	now = now.Add(30 * time.Minute)
	if _, err := s.Cycle(context.Background()); err == nil {
		t.Fatal("a failed walk passed")
	}
	if got, gotMax := gaugeValue(t, reg, "fleetsync_variables_lagging"), gaugeValue(t, reg, "fleetsync_sync_lag_max_seconds"); got == 0 || gotMax == 0 {
		t.Fatalf("after a cycle whose walk failed before listing anything: fleetsync_variables_lagging %v, fleetsync_sync_lag_max_seconds %v (were %v, %v); a failed walk must not report that nothing lags", got, gotMax, lagging, lagMax)
	}
}
