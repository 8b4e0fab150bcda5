package state

import chload "github.com/fleetsync/fleetsync/load/clickhouse"

// ClickHouse keeps the marks in the warehouse that holds the data, so
// marks and points live and die together: the marks and the settled
// watermark are chload.Marks (load/clickhouse/marks.go, beside the DDL of
// their tables, which come from (*chload.Schema).Migrate); this type adds
// the lease (lease.go), the event marks (events.go) and the rates
// (rates.go).
type ClickHouse struct {
	*chload.Marks
	c *chload.Client
	// lease is the row of sync_lease that Acquire contends for (lease.go).
	lease string
}

// NewClickHouse returns a store on c's database.
func NewClickHouse(c *chload.Client) *ClickHouse {
	return &ClickHouse{Marks: c.Marks(), c: c, lease: leaseName}
}
