package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// failingWalkSource is a lagVarsSource whose walk can be made to fail
// before it hands anything (the service down, a 503 on the first page).
type failingWalkSource struct {
	lagVarsSource
	fail *bool
}

func (s failingWalkSource) Walk(ctx context.Context, sc Scope, sink WalkSink) error {
	if *s.fail {
		return errors.New("list devices: 503 Service Unavailable")
	}
	return s.lagVarsSource.Walk(ctx, sc, sink)
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// A cycle whose walk fails measured no lag, or only part of it: it must
// not report that nothing lags. The gauges keep what the last complete
// cycle found, or fleetsync_variables_lagging and
// fleetsync_sync_lag_max_seconds would drop to 0 exactly when the source
// fails, and FleetsyncSyncLagHigh (for: 15m) would reset on every failing
// cycle.
func TestAFailedWalkLeavesTheLagGaugesAsTheyWere(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	mem, _ := fixture(4, 20, now.UnixMilli()-20*60_000)
	la := map[string]int64{}
	var ids []string
	for id, pts := range mem.points {
		ids = append(ids, id)
		la[id] = pts[len(pts)-1].TsMs
	}
	fail := false
	src := failingWalkSource{lagVarsSource{mem, la}, &fail}
	st := &memStore{marks: map[string]Mark{}}
	w := &memWriter{rows: map[string]map[int64]Row{}}
	m, _ := NewMetrics(nil)
	s := NewSyncer(src, w, Stages{}, st, SyncOptions{
		Engine: EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour,
		Lookback: time.Hour, LagThreshold: time.Minute,
		Now: func() time.Time { return now },
	}, nil, m)
	if _, err := s.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A point is known to be missing (lastActivity past what the service
	// serves): the next cycle reports it lagging.
	now = now.Add(30 * time.Minute)
	la[ids[0]] = now.UnixMilli() + 10*60_000
	sum, err := s.Cycle(context.Background())
	if err != nil || sum.Lagging != 1 {
		t.Fatalf("second cycle: %v, %d lagging; want 1", err, sum.Lagging)
	}
	lagging, lagMax := gaugeValue(t, m.lagging), gaugeValue(t, m.lagMax)
	if lagging != 1 || lagMax <= 0 {
		t.Fatalf("after the second cycle: lagging %v, lag max %v", lagging, lagMax)
	}
	// The third cycle's walk fails at once: nothing was measured.
	fail = true
	now = now.Add(30 * time.Minute)
	if _, err := s.Cycle(context.Background()); err == nil {
		t.Fatal("a failed walk passed")
	}
	if got, gotMax := gaugeValue(t, m.lagging), gaugeValue(t, m.lagMax); got == 0 || gotMax == 0 {
		t.Fatalf("after a cycle whose walk failed before listing anything: fleetsync_variables_lagging %v, fleetsync_sync_lag_max_seconds %v (were %v, %v); a failed walk must not report that nothing lags", got, gotMax, lagging, lagMax)
	}
}
