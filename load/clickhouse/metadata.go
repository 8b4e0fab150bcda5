package clickhouse

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Metadata stores what the service says of the fleet beside its points:
// devices and variables (this file; which of them changed since the
// stored rows, metadata_changes.go), organizations, device groups and
// event logs (fleet.go). It is pipeline/metadata's RefreshStore and
// EventLogWriter (Client.Metadata).
type Metadata struct{ *pool }

// WriteDevices stores the snapshot of devices (deleted = 0) with synced_at,
// replacing earlier snapshots of the same ids.
func (c *Metadata) WriteDevices(ctx context.Context, devices []pipeline.Device, syncedAt time.Time) error {
	if len(devices) == 0 {
		return nil
	}
	version := c.nextVersion()
	synced := clampTime(syncedAt)
	query := "INSERT INTO " + c.table(TableDevices) +
		" (id, label, name, description, url, properties, tags, organization_id, created_at, last_activity_ms, deleted, synced_at, version)"
	err := c.retry(ctx, TableDevices, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, query)
		if err != nil {
			return err
		}
		defer b.Abort()
		for _, d := range devices {
			tags := d.Tags
			if tags == nil {
				tags = []string{}
			}
			if err := b.Append(d.ID, d.Label, d.Name, d.Description, d.URL, jsonText(d.Properties), tags,
				d.Organization, clampTime(d.CreatedAt), d.LastActivityMs, uint8(0), synced, version); err != nil {
				return fmt.Errorf("device %s: %w", d.ID, err)
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("insert %d devices into %s: %w", len(devices), c.table(TableDevices), err)
	}
	c.metrics.rows.WithLabelValues(TableDevices).Add(float64(len(devices)))
	return nil
}

// WriteVariables stores the snapshot of variables (deleted = 0) with
// synced_at, replacing earlier snapshots of the same ids. color is the
// `_color` key of the variable's properties, the display colour.
func (c *Metadata) WriteVariables(ctx context.Context, vars []pipeline.Variable, syncedAt time.Time) error {
	if len(vars) == 0 {
		return nil
	}
	version := c.nextVersion()
	synced := clampTime(syncedAt)
	query := "INSERT INTO " + c.table(TableVariables) +
		" (id, device_id, device_label, label, name, properties, color, created_at, last_activity_ms, deleted, synced_at, version)"
	err := c.retry(ctx, TableVariables, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, query)
		if err != nil {
			return err
		}
		defer b.Abort()
		for _, v := range vars {
			if err := b.Append(v.ID, v.DeviceID, v.DeviceLabel, v.Label, v.Name, jsonText(v.Properties), colorOf(v.Properties),
				clampTime(v.CreatedAt), v.LastActivityMs, uint8(0), synced, version); err != nil {
				return fmt.Errorf("variable %s: %w", v.ID, err)
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("insert %d variables into %s: %w", len(vars), c.table(TableVariables), err)
	}
	c.metrics.rows.WithLabelValues(TableVariables).Add(float64(len(vars)))
	return nil
}

// MarkDeleted flags the objects ids of table (TableDevices or
// TableVariables) as deleted = 1 by inserting a newer copy of each current
// row; rows already flagged or unknown ids are left alone. The server copies
// the rows itself (INSERT ... SELECT), so nothing travels back and forth.
func (c *Metadata) MarkDeleted(ctx context.Context, table string, ids []string) error {
	var cols string
	switch table {
	case TableDevices:
		cols = "id, label, name, description, url, properties, tags, organization_id, created_at, last_activity_ms"
	case TableVariables:
		cols = "id, device_id, device_label, label, name, properties, color, created_at, last_activity_ms"
	default:
		return fmt.Errorf("mark deleted: table %q has no deleted flag; want %s or %s", table, TableDevices, TableVariables)
	}
	const perStatement = 1000
	for start := 0; start < len(ids); start += perStatement {
		part := ids[start:min(start+perStatement, len(ids))]
		version := c.nextVersion()
		now := time.Now().Unix()
		query := fmt.Sprintf("INSERT INTO %s (%s, deleted, synced_at, version) SELECT %s, 1, toDateTime(%d, 'UTC'), toUInt64(%d) FROM %s FINAL WHERE has(?, id) AND deleted = 0",
			c.table(table), cols, cols, now, version, c.table(table))
		err := c.retry(ctx, table, func(ctx context.Context) error {
			return c.conn.Exec(ctx, query, part)
		})
		if err != nil {
			return fmt.Errorf("mark %d ids deleted in %s: %w", len(part), c.table(table), err)
		}
	}
	return nil
}

// jsonText is a properties object as stored: "{}" when the source gave none.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	return string(raw)
}

// colorOf returns properties._color when it is a string, else "".
func colorOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var p struct {
		Color any `json:"_color"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return ""
	}
	s, _ := p.Color.(string)
	return s
}

// clampTime keeps t inside DateTime's range (1970 to 2106), so a zero
// time.Time stores as the epoch instead of wrapping around.
func clampTime(t time.Time) time.Time {
	switch s := t.Unix(); {
	case s < 0:
		return time.Unix(0, 0).UTC()
	case s > 1<<32-1:
		return time.Unix(1<<32-1, 0).UTC()
	}
	return t.UTC()
}
