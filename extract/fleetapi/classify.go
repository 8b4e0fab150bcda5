package fleetapi

import "net/http"

// These methods classify the client's errors for any caller that decides by
// behaviour rather than by type (the sync's pipeline does, without
// importing this package): whether a retry may succeed, whether the object
// is gone, whether a range is past retention.

// NotFound reports a 404: the device or variable asked for does not exist
// (any more).
func (e *APIError) NotFound() bool { return e.Status == http.StatusNotFound }

// Retryable reports whether a later attempt may succeed (5xx, 408, and the
// rate limits 429 and 420).
func (e *APIError) Retryable() bool { return retryableStatus(e.Status) }

// Retryable is always true: connection failures, timeouts and cut bodies
// are transient.
func (e *TransportError) Retryable() bool { return true }

// RetentionExceeded marks the 403003 rejection for the pipeline, which moves
// its retention floor forward.
func (e *RetentionError) RetentionExceeded() bool { return true }
