package pipeline

import (
	"errors"
	"fmt"
	"strings"
)

// RetryableError is implemented by errors that a later attempt may not
// repeat (network failures, 5xx, 429, bodies cut mid-stream). The source's
// error types implement it; the pipeline decides by type, never by text.
type RetryableError interface {
	error
	Retryable() bool
}

// RetentionError is implemented by the source's error for a range that
// reaches past the account's retention window (for the Fleet Telemetry
// API, a 403 with code 403003; extract/fleetapi tells it).
type RetentionError interface {
	error
	RetentionExceeded() bool
}

// NotFoundError is implemented by the source's error for an object the
// service does not know (404): a device or variable deleted since the
// metadata walk listed it.
type NotFoundError interface {
	error
	NotFound() bool
}

// IsNotFound reports whether err says the object asked for does not exist.
func IsNotFound(err error) bool {
	var r NotFoundError
	return errors.As(err, &r) && r.NotFound()
}

// IsRetryable reports whether err says a retry may succeed.
func IsRetryable(err error) bool {
	var r RetryableError
	return errors.As(err, &r) && r.Retryable()
}

// IsScoped reports whether err says one of the request's variables may have
// caused it (see ScopedError).
func IsScoped(err error) bool {
	var s ScopedError
	return errors.As(err, &s) && s.VariableScoped()
}

// IsRetention reports whether err is a retention-window rejection.
func IsRetention(err error) bool {
	var r RetentionError
	return errors.As(err, &r) && r.RetentionExceeded()
}

// TargetError is the failure of one variable in a run.
type TargetError struct {
	Variable Variable
	Start    int64
	End      int64
	Err      error
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("variable %s/%s (%s) window %s..%s: %v", e.Variable.DeviceLabel, e.Variable.Label,
		e.Variable.ID, msTime(e.Start), msTime(e.End), e.Err)
}

func (e *TargetError) Unwrap() error { return e.Err }

// LoadError is a target's failure to load its rows into the warehouse, as
// opposed to a failure to read them from the source.
type LoadError struct{ Err error }

func (e *LoadError) Error() string { return e.Err.Error() }

// Unwrap returns the writer's error.
func (e *LoadError) Unwrap() error { return e.Err }

// TooLargeError is implemented by the source's error for a response too
// large to take in one piece (for the Fleet Telemetry API, fleetapi's
// TooLargeError: `results` served before `columns`, more of them than its
// decoder holds). Nothing of the response reached the sink, and a request
// for less gets a smaller one: the reader asks for fewer variables, then
// for halves of one variable's window (reader.shrink).
type TooLargeError interface {
	error
	TooLarge() bool
}

// IsTooLarge reports whether err says the response was too large to hold.
func IsTooLarge(err error) bool {
	var e TooLargeError
	return errors.As(err, &e) && e.TooLarge()
}

// MetadataError reports the parts of the fleet's metadata (groups,
// organizations, event logs, deletion flags) a cycle could not refresh while
// devices and variables were stored. The cycle still syncs the points and
// returns this error at its end. The metadata stages (pipeline/metadata)
// return it from SnapshotRun.Finish; the Syncer tells it from a failure of
// the cycle, so it lives beside the cycle.
type MetadataError struct {
	Errs []error
}

func (e *MetadataError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return "fleet metadata only partly refreshed (the points were synced): " + strings.Join(msgs, "; ")
}

// Unwrap gives the individual failures.
func (e *MetadataError) Unwrap() []error { return e.Errs }
