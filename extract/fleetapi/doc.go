// Package fleetapi is the HTTP client of the Fleet Telemetry Service: the
// Platform API under /api/v2.0 (devices, variables, device groups,
// organizations, event logs) and the Device Data API under /api/v1.6 (values,
// statistics, aggregation, raw series).
//
// The Client implements pipeline.Source. It authenticates with the
// X-Auth-Token header only, never with a ?token= query parameter, and never
// puts a token in a log line, an error or a metric. Every call is retried
// with exponential backoff (cenkalti/backoff/v4) while its error is retryable
// (5xx, 429, timeouts, resets, bodies cut mid-stream), honouring Retry-After;
// other 4xx are permanent. A 401 invalidates the token source and retries
// once with a freshly read token.
//
// The raw-series decoder is a hand-written single-pass scanner over a byte
// window: it streams a response frame by frame into a pipeline.FrameSink
// without holding the body, and reads cell positions from the returned
// columns, as the service's documentation requires.
package fleetapi
