package pipeline

// Batch is a columnar chunk of datapoints rows, the shape the loader hands to
// clickhouse-go's columnar Append without copying row by row. Every slice has
// Len() elements. A Batch is reused after Reset, so its slices keep their
// capacity between chunks.
type Batch struct {
	VariableID    []string
	DeviceID      []string
	DeviceLabel   []string
	VariableLabel []string
	TsMs          []int64
	Value         []float64
	Context       []string
	// Lat and Lng hold context.lat and context.lng; HasLat and HasLng say
	// whether each was a number (the column is NULL otherwise).
	Lat    []float64
	Lng    []float64
	HasLat []bool
	HasLng []bool

	// Bytes approximates the encoded size of the rows, so the loader can
	// flush by size as well as by row count.
	Bytes int

	// Spans lists the variables whose rows the chunk holds, so that the
	// pipeline can acknowledge them once the chunk is loaded.
	Spans []Span
}

// Span is the run of rows of one variable inside a Batch.
type Span struct {
	VariableID string
	Rows       int
	// MinTsMs and MaxTsMs bound the span's timestamps: once acknowledged,
	// the range its target loaded (Done).
	MinTsMs, MaxTsMs int64
}

// Len is the number of rows in the batch.
func (b *Batch) Len() int { return len(b.TsMs) }

// Reset empties the batch and keeps its capacity.
func (b *Batch) Reset() { b.Truncate(0); b.Spans = b.Spans[:0]; b.Bytes = 0 }

// Truncate drops every row from n on; a frame cut by the request limit is
// discarded this way before it is re-read in smaller windows.
func (b *Batch) Truncate(n int) {
	// The contexts dropped are let go, so that a pooled chunk does not
	// keep the last ones it held alive (each is a string of its own; the
	// ids and labels are the variables').
	clear(b.Context[n:])
	b.VariableID = b.VariableID[:n]
	b.DeviceID = b.DeviceID[:n]
	b.DeviceLabel = b.DeviceLabel[:n]
	b.VariableLabel = b.VariableLabel[:n]
	b.TsMs = b.TsMs[:n]
	b.Value = b.Value[:n]
	b.Context = b.Context[:n]
	b.Lat = b.Lat[:n]
	b.Lng = b.Lng[:n]
	b.HasLat = b.HasLat[:n]
	b.HasLng = b.HasLng[:n]
}

// Row is one datapoints row, used where convenience beats the columnar form
// (tests, small inserts).
type Row struct {
	VariableID    string
	DeviceID      string
	DeviceLabel   string
	VariableLabel string
	TsMs          int64
	Value         float64
	Context       string
	Lat, Lng      float64
	HasLat        bool
	HasLng        bool
}

// Append adds one row.
func (b *Batch) Append(r Row) {
	b.VariableID = append(b.VariableID, r.VariableID)
	b.DeviceID = append(b.DeviceID, r.DeviceID)
	b.DeviceLabel = append(b.DeviceLabel, r.DeviceLabel)
	b.VariableLabel = append(b.VariableLabel, r.VariableLabel)
	b.TsMs = append(b.TsMs, r.TsMs)
	b.Value = append(b.Value, r.Value)
	b.Context = append(b.Context, r.Context)
	b.Lat = append(b.Lat, r.Lat)
	b.Lng = append(b.Lng, r.Lng)
	b.HasLat = append(b.HasLat, r.HasLat)
	b.HasLng = append(b.HasLng, r.HasLng)
	b.Bytes += RowBytes(&r)
}

// RowBytes approximates the size of a row on the wire: fixed-width columns
// plus the strings.
func RowBytes(r *Row) int {
	return 8*5 + 2 + len(r.VariableID) + len(r.DeviceID) + len(r.DeviceLabel) + len(r.VariableLabel) + len(r.Context)
}
