package pipeline

import (
	"sync/atomic"
	"time"
)

// EngineOptions size the moving parts of one run.
type EngineOptions struct {
	// RowsPerRequest is the raw-series limit per variable.
	RowsPerRequest int
	// VariablesPerRequest packs this many variables into one raw-series POST.
	VariablesPerRequest int
	// MaxInFlight is the number of concurrent API requests.
	MaxInFlight int
	// Counts is the source's CountSource when it has one; nil reads cut
	// frames again in halves instead of proving them (density.go).
	Counts CountSource
	// BatchRows, BatchBytes and BatchAge decide when an INSERT is sent.
	BatchRows  int
	BatchBytes int
	BatchAge   time.Duration
	// InsertWorkers is the number of concurrent INSERTs (connections).
	InsertWorkers int
	// RequestAttempts bounds how often one raw-series request is tried when
	// it fails after its response started (a body cut mid-stream); failures
	// before the response are retried by the Source itself. Default 5
	// (retries.go).
	RequestAttempts int
	// RetryWait scales the pause before such a re-try (RereadRetry); tests
	// shrink it. Default 500ms (retries.go).
	RetryWait time.Duration
	// Progress, when set, counts the points acknowledged by ClickHouse as
	// they are, for a progress line on long backfills.
	Progress *atomic.Int64
	// Floor is the earliest timestamp (POSIX ms) requests may reach; it
	// moves forward when the service rejects a range as past its retention.
	Floor int64
	// FloorMargin is kept between the service's real retention floor, once
	// a rejection made the engine search for it, and the floor it moves to,
	// so that requests are not rejected again as the service's floor
	// advances with time (default 1m).
	FloorMargin time.Duration
	// Links are the commit chain's links in front of the marks (see
	// commit.go): what keeps the warehouse's derived tables, say. A link
	// hands a target on only once what it derives from the target's rows
	// is durable, so that a mark is never written before it.
	Links []Link
	// Turns, when set, hands each goroutine of a run, by its name, the
	// function it calls as it starts and each time it goes on after
	// waiting for another goroutine or for time (turns.go). The
	// deterministic simulation parks it there until its seed picks it, so
	// that one goroutine runs at a time, in an order the seed chooses.
	// Nil, as in the product, lets them all run at once.
	Turns func(name string) func()
}

// defaultVariablesPerRequest is EngineOptions.VariablesPerRequest when
// unset; the plan's re-read slots are sized by the same number.
const defaultVariablesPerRequest = 50

func (o *EngineOptions) defaults() {
	if o.RowsPerRequest <= 0 {
		o.RowsPerRequest = 10000
	}
	if o.VariablesPerRequest <= 0 {
		o.VariablesPerRequest = defaultVariablesPerRequest
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 4
	}
	if o.BatchRows <= 0 {
		o.BatchRows = 1000000
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 128 << 20
	}
	if o.BatchAge <= 0 {
		o.BatchAge = 5 * time.Second
	}
	if o.InsertWorkers <= 0 {
		o.InsertWorkers = 2
	}
	if o.RequestAttempts <= 0 {
		o.RequestAttempts = defaultRequestAttempts
	}
	if o.RetryWait <= 0 {
		o.RetryWait = defaultRetryWait
	}
	if o.FloorMargin <= 0 {
		o.FloorMargin = time.Minute
	}
}

// rereadPolicy spaces the re-reads of one raw-series request whose response
// failed mid-stream (retries.go).
func (o *EngineOptions) rereadPolicy() RetryPolicy { return RereadRetry(o.RetryWait) }
