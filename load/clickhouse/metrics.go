package clickhouse

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the loader's Prometheus series, labelled by table (without
// the prefix, so dashboards do not depend on it).
type metrics struct {
	rows     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	// rollupVariables counts the variables whose rollups were recomputed.
	rollupVariables prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetsync_rows_inserted_total",
			Help: "Rows acknowledged by ClickHouse, by table.",
		}, []string{"table"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetsync_clickhouse_insert_duration_seconds",
			Help:    "Time one INSERT attempt spent sending its rows and waiting for their acknowledgement (not waiting for the source), successful or not, by table.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 10),
		}, []string{"table"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetsync_clickhouse_retries_total",
			Help: "Write attempts that failed with a retryable error and were retried, by table.",
		}, []string{"table"}),
		rollupVariables: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetsync_rollup_variables_total",
			Help: "Variables whose analyst-table rows were brought up to date after a load (a variable handed twice counts twice).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.rows, err = register(reg, m.rows)
	if err != nil {
		return nil, err
	}
	m.duration, err = register(reg, m.duration)
	if err != nil {
		return nil, err
	}
	m.retries, err = register(reg, m.retries)
	if err != nil {
		return nil, err
	}
	m.rollupVariables, err = register(reg, m.rollupVariables)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register adds c to reg, or returns the collector already registered under
// the same name, so several clients (the sync and the state store, say) can
// share one registry. extract/fleetapi has its twin, which it cannot
// import: the API client imports no fleetsync package.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("register clickhouse metrics: %w", err)
	}
	return c, nil
}
