package pipeline

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the pipeline's Prometheus metrics. None carries a per-variable
// or per-device label: fleets have 10^5 variables and more.
type Metrics struct {
	pointsLoaded        prometheus.Counter
	requestRetries      prometheus.Counter
	loadRetries         prometheus.Counter
	cycles              *prometheus.CounterVec
	cycleDuration       prometheus.Histogram
	lastCycleStart      prometheus.Gauge
	lastSuccess         prometheus.Gauge
	lastCycleSuccess    prometheus.Gauge
	variablesFailed     prometheus.Gauge
	variablesSynced     prometheus.Gauge
	lag                 prometheus.Histogram
	lagMax              prometheus.Gauge
	settledBefore       prometheus.Gauge
	lagging             prometheus.Gauge
	lagThreshold        prometheus.Gauge
	scheduleInterval    prometheus.Gauge
	retentionFloorMoved prometheus.Counter
	stageDuration       *prometheus.HistogramVec
	stageSuccess        *prometheus.GaugeVec
	// Density-aware reads (density.go), of the last cycle or backfill.
	rowsServedPerLoaded prometheus.Gauge
	requestsPerMinimum  prometheus.Gauge
	countRequests       prometheus.Counter
}

// NewMetrics creates the pipeline metrics and registers them on reg (nil
// registers nothing, for tests that do not look at metrics). It fails when
// reg already holds a metric of the same name.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		pointsLoaded: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetsync_points_loaded_total",
			Help: "Data points loaded into ClickHouse and acknowledged."}),
		requestRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetsync_series_request_retries_total",
			Help: "Raw-series requests read again after their response failed mid-stream."}),
		loadRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetsync_load_rereads_total",
			Help: "Variables read from the source again because ClickHouse failed their INSERT after its rows were streamed."}),
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetsync_cycles_total",
			Help: "Sync cycles by result (success, failure)."}, []string{"result"}),
		cycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetsync_cycle_duration_seconds",
			Help: "Duration of sync cycles.", Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		lastCycleStart: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_last_cycle_start_timestamp_seconds",
			Help: "Unix time the last cycle started."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_last_success_timestamp_seconds",
			Help: "Unix time the last fully successful cycle ended."}),
		lastCycleSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_last_cycle_success",
			Help: "1 when the last cycle synced every variable, 0 otherwise."}),
		variablesFailed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_variables_failed",
			Help: "Variables that failed in the last cycle."}),
		variablesSynced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_variables_synced",
			Help: "Variables in scope in the last cycle."}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetsync_sync_lag_seconds",
			Help:    "Per-variable sync lag observed at the end of each cycle: how far the warehouse trails a point known to be missing (lastActivity moved since the last complete read, or a point stamped ahead fell due), 0 when none is known.",
			Buckets: []float64{0, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400}}),
		lagMax: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_sync_lag_max_seconds",
			Help: "Greatest per-variable sync lag at the end of the last cycle."}),
		settledBefore: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_settled_before_timestamp_seconds",
			Help: "The settled watermark after the last complete cycle: no cycle loads a point of a variable that holds points stamped before it, so what is derived from points stamped before it no longer changes (a variable's first points excepted)."}),
		lagging: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_variables_lagging",
			Help: "Variables whose lag exceeds metrics.lag_threshold at the end of the last cycle."}),
		lagThreshold: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_lag_threshold_seconds",
			Help: "The configured lag threshold (metrics.lag_threshold)."}),
		scheduleInterval: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_schedule_interval_seconds",
			Help: "The period of sync.schedule, for alerts on missing cycles."}),
		retentionFloorMoved: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetsync_retention_floor_moved_total",
			Help: "Cycles in which the service rejected the configured retention window and the floor moved forward."}),
		stageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleetsync_stage_duration_seconds",
			Help:    "Duration of each stage of a cycle or backfill (walk, metadata, plan, move, lag, events).",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}, []string{"stage"}),
		stageSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleetsync_stage_success",
			Help: "1 when the stage's last run succeeded, 0 when it failed, by stage."}, []string{"stage"}),
		rowsServedPerLoaded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_series_rows_served_per_loaded",
			Help: "Rows the source served per distinct point loaded, in the last cycle or backfill that read any (1 is no waste)."}),
		requestsPerMinimum: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetsync_series_requests_per_minimum",
			Help: "Raw-series requests per the fewest the configured limit allows (ceil(points/rows_per_request) frames per variable, variables_per_request frames per request), in the last cycle or backfill that read any."}),
		countRequests: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleetsync_series_count_requests_total",
			Help: "Count requests (aggregation POST) asked to prove frames of rows_per_request rows whole."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.pointsLoaded, m.requestRetries, m.loadRetries, m.cycles, m.cycleDuration,
		m.lastCycleStart, m.lastSuccess, m.lastCycleSuccess, m.variablesFailed, m.variablesSynced, m.lag, m.lagMax, m.settledBefore,
		m.lagging, m.lagThreshold, m.scheduleInterval, m.retentionFloorMoved, m.stageDuration, m.stageSuccess,
		m.rowsServedPerLoaded, m.requestsPerMinimum, m.countRequests} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register the pipeline's metrics: %w", err)
		}
	}
	return m, nil
}

// unregistered returns metrics that no registry exports, for a Syncer or
// Engine built without any, so that the stages record unconditionally.
func unregistered() *Metrics {
	m, _ := NewMetrics(nil)
	return m
}

// SetScheduleInterval publishes the cron period for alerting.
func (m *Metrics) SetScheduleInterval(seconds float64) { m.scheduleInterval.Set(seconds) }
