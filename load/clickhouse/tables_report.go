package clickhouse

// What `fleetsync verify` reports of the analyst tables, beside its check
// of the points (pipeline/verify's Report): AnalystTables.CheckRollups
// checks them against the warehouse's own points.

// TableDiff is one row of an analyst table that differs from the same
// aggregate over datapoints FINAL.
type TableDiff struct {
	// Table is datapoints_hourly or datapoints_latest.
	Table      string `json:"table"`
	VariableID string `json:"variable_id"`
	// HourMs is the start of the hour (POSIX ms) of an hourly row; 0 for a
	// latest row.
	HourMs int64 `json:"hour_ms,omitempty"`
	// Problem says how the row differs: missing, extra, or the columns
	// that differ with their values and the expected ones.
	Problem string `json:"problem"`
}

// TablesReport is the check of the analyst tables over a verification's
// range: every hour the range touches, and the latest row of every
// variable with a point in those hours.
type TablesReport struct {
	// Hours and Latest are the rows the aggregates over datapoints FINAL
	// expect (each compared with the table's row, or found missing).
	Hours  int         `json:"hours"`
	Latest int         `json:"latest"`
	Diffs  []TableDiff `json:"diffs"`
	// Repaired is the rows a repair rewrote, and Remaining what a second
	// check still found.
	Repaired  int         `json:"repaired_rows,omitempty"`
	Remaining []TableDiff `json:"remaining,omitempty"`
}
