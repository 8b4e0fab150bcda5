package fleetapi

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
	// LastActivityMs is POSIX milliseconds; zero when the service did not say.
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
// that receives the Point, because the decoders reuse their buffers.
type Point struct {
	TsMs    int64
	Value   float64
	Context []byte
	// Lat and Lng are the point's position, each with whether it has one:
	// the context's top-level "lat" and "lng" members when they are
	// numbers, read while the decoder scanned the context, so that a
	// caller need not scan it again (position.go says which numbers
	// count).
	Lat, Lng       float64
	HasLat, HasLng bool
}

// SeriesRequest asks for the raw series of several variables over one
// closed window. Start and End are POSIX milliseconds, both inclusive; set
// both, or the service caps each variable at 100 points.
type SeriesRequest struct {
	VariableIDs []string
	Start       int64
	End         int64
	// Limit is the per-variable row limit; a frame that returns Limit rows
	// may have been cut. 0 means none.
	Limit int
}

// FrameSink receives a raw-series response frame by frame, in request order.
// Frame i belongs to SeriesRequest.VariableIDs[i].
type FrameSink interface {
	// Point is called once per non-null row of frame i.
	Point(i int, p Point) error
	// EndFrame is called after the last row of frame i with the number of
	// rows the frame held (null rows included), so the caller can tell a
	// frame cut by the limit.
	EndFrame(i int, rows int) error
}
