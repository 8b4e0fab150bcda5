// Package pipeline holds fleetsync's domain types and the sync itself: it plans
// per-variable windows, moves points from a Source to a Writer with bounded
// memory, and commits high-water marks to a StateStore only after ClickHouse has
// acknowledged the rows below them.
//
// The adapters (extract/fleetapi, load/clickhouse, state) depend on this package;
// it depends on none of them.
package pipeline

import (
	"encoding/json"
	"time"
)

// Device is a data source of the fleet as the Platform API describes it.
type Device struct {
	ID          string
	Label       string
	Name        string
	Description string
	URL         string
	// Properties is the device's free-form metadata as a JSON object text.
	Properties json.RawMessage
	Tags       []string
	CreatedAt  time.Time
	// LastActivityMs is POSIX milliseconds; zero when the source did not say.
	LastActivityMs int64
	// Organization is the owning organization's id when known (from an
	// organization's device listing); empty otherwise.
	Organization string
}

// Variable is one time-series channel of a device.
type Variable struct {
	ID          string
	Label       string
	Name        string
	DeviceID    string
	DeviceLabel string
	// Properties is the variable's metadata as a JSON object text.
	Properties     json.RawMessage
	CreatedAt      time.Time
	LastActivityMs int64
}

// Point is one decoded data point. Context is the point's context object as
// compact JSON text ("{}" when empty); it is only valid during the callback
// that receives the Point, because decoders reuse their buffers.
type Point struct {
	TsMs    int64
	Value   float64
	Context []byte
	// Lat and Lng are the position the source reads in the point (for the
	// Fleet Telemetry API, the context's "lat" and "lng" numbers), each
	// with whether it has one; they fill the lat and lng columns.
	Lat, Lng       float64
	HasLat, HasLng bool
}

// SeriesRequest asks the source for the raw series of several variables over
// one closed window. Start and End are POSIX milliseconds, both inclusive, and
// are always both set so that the service's implicit 100-point cap never
// applies.
type SeriesRequest struct {
	VariableIDs []string
	Start       int64
	End         int64
	// Limit is the per-variable row limit; a frame that returns Limit rows
	// may have been cut and must be re-read in smaller windows. 0 means none.
	Limit int
}

// Mark is the sync position of one variable.
type Mark struct {
	VariableID string
	// HwmMs is the greatest ts_ms loaded and acknowledged for the variable.
	HwmMs int64
	// LastActivityMs is the variable's lastActivity as the walk before the
	// last complete read saw it, never one past that read's end. It is a
	// hint only: between re-reads, a cycle reads a variable whose
	// lastActivity moved, and skips one whose lastActivity did not.
	LastActivityMs int64
	// CheckedMs is the end (POSIX ms) of the last complete read of the
	// variable, of either kind (see RecheckedMs); 0 when unknown (marks
	// written before it existed, or by a backfill).
	CheckedMs int64
	// FutureMs is the earliest timestamp after CheckedMs that the last read
	// saw (a device clock ahead) and left for a later cycle, or a lower
	// bound of it; 0 when it saw none. The variable is read again by the
	// first cycle that ends at or after it.
	FutureMs int64
	// RereadMs is where the next re-read of the variable's lookback must
	// start, at the latest: the lookback of the mark in force when the last
	// re-read was planned (its start when it had no mark), or earlier where
	// reads of the new points alone came since (they owe what the mark they
	// were planned with owed). A point written while a read ran, after it
	// had passed the point's timestamp, is still owed: the mark promised it
	// when it was written, and the read moved the mark past it. A re-read
	// starts at min(HwmMs - lookback, RereadMs). 0 when unknown (marks
	// written before it existed), which leaves HwmMs - lookback.
	RereadMs int64
	// RecheckedMs is the end of the last re-read: the last complete read
	// that started at min(HwmMs - lookback, RereadMs) of the mark it was
	// planned with. Between re-reads a cycle reads only the points after
	// the mark (Target.Tail); once the variable's phase of idle_recheck
	// came round since (RecheckAt), at the latest once RecheckedMs is
	// idle_recheck old, the variable is re-read. 0 when unknown: a
	// variable never re-read, whose next read is a re-read, or a mark
	// written before it existed, whose CheckedMs stands in (every complete
	// read was a re-read then). The 1 that earlier versions wrote to ask
	// for a re-read in the next cycle gets one: it is long past.
	RecheckedMs int64
	// LookbackMs is the sync.lookback RereadMs was reckoned under: a debt
	// says which points written later are no longer promised, and that
	// depends on the lookback. MergeMark takes the greater of two debts
	// as readers of each lookback take them (windowFrom). 0 when unknown
	// (marks written before it existed, or by a run that does not say).
	LookbackMs int64
	UpdatedAt  time.Time
}

// VariableError is implemented by a source's error that belongs to one
// variable of a multi-variable raw-series request: a frame the decoder could
// not read, or a rejection whose body names exactly one requested variable.
// VariableIndex is that variable's position in SeriesRequest.VariableIDs,
// or -1 when the error cannot be tied to one. The engine fails that variable
// alone and reads the others again without it.
type VariableError interface {
	error
	VariableIndex() int
}

// ScopedError is implemented by a source's permanent error that one of the
// request's variables may have caused (a 400, 403 without a code, 404, 423
// and the like), as opposed to one that concerns the account or the service
// (401, 420, 429, 5xx). The engine splits a multi-variable request that
// fails so until the failure is confined to the variables that cause it.
type ScopedError interface {
	error
	VariableScoped() bool
}
