package fleetapi

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Client's Prometheus series. The endpoint label is a
// bounded name of the route (devices, raw_series, ...), never an id.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	// rate and limited follow the request rate (see limiter.go).
	rate    prometheus.Gauge
	limited *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetsync_api_requests_total",
			Help: "Requests sent to the Fleet Telemetry Service, by endpoint and status class (2xx, 4xx, 5xx, or error when no response came).",
		}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetsync_api_request_duration_seconds",
			Help:    "Duration of one request to the Fleet Telemetry Service, body read included, by endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 10),
		}, []string{"endpoint"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetsync_api_retries_total",
			Help: "Requests to the Fleet Telemetry Service retried after a retryable failure or a 401, by endpoint.",
		}, []string{"endpoint"}),
		rate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetsync_api_request_rate",
			Help: "Requests per second the client allows itself now: learned from the service's 429s, never above source.requests_per_second; 0 while unlimited.",
		}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetsync_api_rate_limited_total",
			Help: "Rate-limit answers from the Fleet Telemetry Service, by code: 429 (too many requests; the client slows down) and 420 (the token's API budget is used up; the client pauses).",
		}, []string{"code"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.requests, err = register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.retries, err = register(reg, m.retries); err != nil {
		return nil, err
	}
	if m.rate, err = register(reg, m.rate); err != nil {
		return nil, err
	}
	if m.limited, err = register(reg, m.limited); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same description (a second Client on one registry shares the series).
// load/clickhouse has its twin: the API client imports no fleetsync package
// (cmd/fleetsync/deps_test.go), so the two cannot share one.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
