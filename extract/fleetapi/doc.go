// Package fleetapi is the HTTP client of the Fleet Telemetry Service: the
// Platform API under /api/v2.0 (devices, variables, device groups,
// organizations, event logs) and the Device Data API under /api/v1.6 (values,
// statistics, aggregation, raw series).
//
// It imports nothing of fleetsync, so any program can use it; the adapter
// extract/fleet puts it behind the sync's ports. It authenticates with the
// X-Auth-Token header only, never with a ?token= query parameter, and never
// puts a token in a log line, an error or a metric. Every call is retried
// with exponential backoff (cenkalti/backoff/v4) while its error is retryable
// (5xx, 429 and 420, timeouts, resets, bodies cut mid-stream), honouring
// Retry-After; other 4xx are permanent. A 401 invalidates the token source
// and retries once with a freshly read token. The token goes only to the
// base URL's origin: a redirect elsewhere is followed without it, and a
// list's `next` link naming another host is followed on the base URL.
//
// Errors tell a caller how far a failure reaches, by method: a raw-series
// frame the decoder refuses, or a rejection whose body names one requested
// variable, reports that variable's index (VariableIndex); other permanent
// 4xx say that some variable of the request may be the cause
// (VariableScoped); Retryable, NotFound and RetentionExceeded say the rest.
//
// The raw-series decoder is a hand-written single-pass scanner over a byte
// window: it streams a response frame by frame into a FrameSink
// without holding the body, and reads cell positions from the returned
// columns, as the service's documentation requires.
package fleetapi
