package fleetapi

import (
	"net/http"

	"github.com/fleetsync/fleetsync/pipeline"
)

// The pipeline decides by interface what to do with a failed request: these
// methods carry this package's classification to it without the pipeline
// importing the client.
var (
	_ pipeline.RetryableError = (*APIError)(nil)
	_ pipeline.RetryableError = (*TransportError)(nil)
	_ pipeline.RetentionError = (*RetentionError)(nil)
	_ pipeline.NotFoundError  = (*APIError)(nil)
	_ pipeline.ScopedError    = (*APIError)(nil)
	_ pipeline.ScopedError    = (*RetentionError)(nil)
	_ pipeline.VariableError  = (*APIError)(nil)
	_ pipeline.VariableError  = (*DecodeError)(nil)
	_ pipeline.VariableError  = (*TransportError)(nil)
	_ pipeline.RetryableError = (*ListChangedError)(nil)
)

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
