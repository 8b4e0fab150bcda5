package verify

import "github.com/fleetsync/fleetsync/pipeline"

// Mismatch is one variable whose warehouse disagrees with the source.
type Mismatch struct {
	DeviceLabel    string  `json:"device_label"`
	VariableLabel  string  `json:"variable_label"`
	VariableID     string  `json:"variable_id"`
	DeviceID       string  `json:"device_id"`
	SourceCount    int64   `json:"source_count"`
	WarehouseCount uint64  `json:"warehouse_count"`
	SourceSum      float64 `json:"source_sum"`
	WarehouseSum   float64 `json:"warehouse_sum"`
	// WarehouseMinTsMs and WarehouseMaxTsMs bound the warehouse's points in
	// the range; 0 when it has none.
	WarehouseMinTsMs int64 `json:"warehouse_min_ts_ms"`
	WarehouseMaxTsMs int64 `json:"warehouse_max_ts_ms"`
	// Via says which endpoint gave the source's numbers.
	Via string `json:"via"`

	// Variable is the variable, for a repair.
	Variable pipeline.Variable `json:"-"`
}

// RepairReport is what a repair did and what it left.
type RepairReport struct {
	Variables int   `json:"variables"`
	Points    int64 `json:"points"`
	Failed    int   `json:"failed"`
	// Remaining are the variables that still disagree after the repair.
	Remaining []Mismatch `json:"remaining"`
}

// Report is a verification's outcome.
type Report struct {
	FromMs        int64      `json:"from_ms"`
	ToMs          int64      `json:"to_ms"`
	RequestedFrom int64      `json:"requested_from_ms"`
	RequestedTo   int64      `json:"requested_to_ms"`
	Variables     int        `json:"variables"`
	Matched       int        `json:"matched"`
	Mismatches    []Mismatch `json:"mismatches"`
	// ViaAggregation and ViaStatistics count the variables whose source
	// numbers came from each endpoint.
	ViaAggregation int           `json:"via_aggregation"`
	ViaStatistics  int           `json:"via_statistics"`
	Repair         *RepairReport `json:"repair,omitempty"`
}
