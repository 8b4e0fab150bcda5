package clickhouse

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"go.uber.org/zap"
)

// pool is what every port shares: one clickhouse-go connection pool, the
// configuration (table names, retry budget, cluster), the metrics, the row
// versions and the cluster's placement of rows. Helpers that more than one
// port needs are its methods; a port's own statements are the port's.
type pool struct {
	cfg     Config
	conn    driver.Conn
	log     *zap.Logger
	metrics *metrics

	// lastVersion makes row versions strictly increasing within the process
	// even when the wall clock stalls or steps back.
	lastVersion atomic.Uint64

	insertPointsSQL string

	// place keys the rows of a cluster's sharded tables (placement.go):
	// loaded by each EnsureSchema, or by the first write.
	place atomic.Pointer[placement]

	// certAsked records that a server asked for a client certificate the
	// configuration does not have (see noteCertRequests).
	certAsked atomic.Bool
}

// table is the fully qualified, back-quoted name of one of fleetsync's
// tables (name is one of the Table* constants), prefix applied.
func (c *pool) table(name string) string {
	return "`" + c.cfg.Database + "`.`" + c.cfg.TablePrefix + name + "`"
}

// nextVersion returns a row version for ReplacingMergeTree: the wall clock
// in nanoseconds, forced strictly above every version this client returned
// before, so a later write of the same key always replaces an earlier one.
func (c *pool) nextVersion() uint64 {
	for {
		last := c.lastVersion.Load()
		v := uint64(time.Now().UnixNano())
		if v <= last {
			v = last + 1
		}
		if c.lastVersion.CompareAndSwap(last, v) {
			return v
		}
	}
}

// insertRows appends n rows, row(i) giving the values of row i in the order
// of columns, as one INSERT into table (retried as a whole). The metadata
// tables and the state store's small tables are written this way.
func (c *pool) insertRows(ctx context.Context, table, columns string, n int, row func(i int) []any) error {
	if n == 0 {
		return nil
	}
	query := "INSERT INTO " + c.table(table) + " (" + columns + ")"
	err := c.retry(ctx, table, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, query)
		if err != nil {
			return err
		}
		defer b.Abort()
		for i := range n {
			if err := b.Append(row(i)...); err != nil {
				return fmt.Errorf("row %d: %w", i, err)
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", n, c.table(table), err)
	}
	c.metrics.rows.WithLabelValues(table).Add(float64(n))
	return nil
}
