package clickhouse

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/fleetsync/fleetsync/pipeline/metadata"
)

// The rest of the fleet's metadata: organizations, device groups and their
// membership (current and history), event logs (their marks are the state
// store's: state.ClickHouse). Every table
// is a ReplacingMergeTree snapshot read with FINAL; a retried insert is
// therefore harmless.

// The warehouse sides of the metadata and event-log stages.
var (
	_ metadata.RefreshStore   = (*Metadata)(nil)
	_ metadata.EventLogWriter = (*Metadata)(nil)
)

// Membership changes recorded in device_group_member_changes.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
)

// markMissingDeleted flags as deleted every live row of table (cols are its
// columns up to created_at; it has deleted, synced_at and version) whose id
// is not in keep. The server copies the rows itself.
func (c *Metadata) markMissingDeleted(ctx context.Context, table, cols string, keep []string, at time.Time) error {
	version := c.nextVersion()
	query := fmt.Sprintf("INSERT INTO %s (%s, deleted, synced_at, version) SELECT %s, 1, toDateTime(%d, 'UTC'), toUInt64(%d) FROM %s FINAL WHERE deleted = 0",
		c.table(table), cols, cols, clampTime(at).Unix(), version, c.table(table))
	var args []any
	if len(keep) > 0 {
		// An empty array literal has no element type on 18.16, so the
		// "keep nothing" case leaves the condition out.
		query += " AND NOT has(?, id)"
		args = append(args, keep)
	}
	err := c.retry(ctx, table, func(ctx context.Context) error { return c.conn.Exec(ctx, query, args...) })
	if err != nil {
		return fmt.Errorf("mark rows of %s missing from the snapshot deleted: %w", c.table(table), err)
	}
	return nil
}

// LiveDevices returns the organization_id of every device not marked
// deleted in the latest snapshot, by device id.
func (c *Metadata) LiveDevices(ctx context.Context) (map[string]string, error) {
	rows, err := c.conn.Query(ctx, "SELECT id, organization_id FROM "+c.table(TableDevices)+" FINAL WHERE deleted = 0")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(TableDevices), err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, org string
		if err := rows.Scan(&id, &org); err != nil {
			return nil, fmt.Errorf("read %s: %w", c.table(TableDevices), err)
		}
		out[id] = org
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(TableDevices), err)
	}
	return out, nil
}

// MarkDevicesDeleted flags devices deleted in the source (see MarkDeleted).
func (c *Metadata) MarkDevicesDeleted(ctx context.Context, ids []string) error {
	return c.MarkDeleted(ctx, TableDevices, ids)
}

// MarkVariablesDeleted flags variables deleted in the source (see
// MarkDeleted).
func (c *Metadata) MarkVariablesDeleted(ctx context.Context, ids []string) error {
	return c.MarkDeleted(ctx, TableVariables, ids)
}

// WriteOrganizations stores the complete list of organizations (deleted =
// 0) and flags the stored ones missing from it as deleted.
func (c *Metadata) WriteOrganizations(ctx context.Context, orgs []metadata.Organization, syncedAt time.Time) error {
	version := c.nextVersion()
	synced := clampTime(syncedAt)
	ids := make([]string, len(orgs))
	err := c.insertRows(ctx, TableOrganizations, "id, label, name, url, created_at, deleted, synced_at, version", len(orgs), func(i int) []any {
		o := orgs[i]
		ids[i] = o.ID
		return []any{o.ID, o.Label, o.Name, o.URL, clampTime(o.CreatedAt), uint8(0), synced, version}
	})
	if err != nil {
		return err
	}
	return c.markMissingDeleted(ctx, TableOrganizations, "id, label, name, url, created_at", ids, syncedAt)
}

type memberKey struct{ group, device string }

// currentMembers reads the current membership with each row's joined_at.
func (c *Metadata) currentMembers(ctx context.Context) (map[memberKey]time.Time, error) {
	rows, err := c.conn.Query(ctx, "SELECT group_id, device_id, joined_at FROM "+c.table(TableDeviceGroupMembers)+" FINAL WHERE removed = 0")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(TableDeviceGroupMembers), err)
	}
	defer rows.Close()
	out := map[memberKey]time.Time{}
	for rows.Next() {
		var k memberKey
		var joined time.Time
		if err := rows.Scan(&k.group, &k.device, &joined); err != nil {
			return nil, fmt.Errorf("read %s: %w", c.table(TableDeviceGroupMembers), err)
		}
		out[k] = joined
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(TableDeviceGroupMembers), err)
	}
	return out, nil
}

type memberRow struct {
	memberKey
	removed uint8
	joined  time.Time
}

// WriteDeviceGroups stores the complete list of groups and their members.
// Groups missing from it are flagged deleted. Each membership of the list
// that the stored membership lacks is written with removed = 0 (joined_at
// and snapshot_at the time of this snapshot); each stored membership
// missing from it, a group's member that left or a deleted group's, is
// written with removed = 1. A membership stored as the list has it is not
// written again. The changes against the
// stored membership go to device_group_member_changes first, so a failure
// between the two inserts repeats a change in the history rather than
// losing it.
func (c *Metadata) WriteDeviceGroups(ctx context.Context, groups []metadata.DeviceGroup, syncedAt time.Time) error {
	prev, err := c.currentMembers(ctx)
	if err != nil {
		return err
	}
	version := c.nextVersion()
	synced := clampTime(syncedAt)
	ids := make([]string, len(groups))
	err = c.insertRows(ctx, TableDeviceGroups, "id, label, name, url, organization_id, tags, created_at, deleted, synced_at, version", len(groups), func(i int) []any {
		g := groups[i]
		ids[i] = g.ID
		tags := g.Tags
		if tags == nil {
			tags = []string{}
		}
		return []any{g.ID, g.Label, g.Name, g.URL, g.Organization, tags, clampTime(g.CreatedAt), uint8(0), synced, version}
	})
	if err != nil {
		return err
	}
	if err := c.markMissingDeleted(ctx, TableDeviceGroups, "id, label, name, url, organization_id, tags, created_at", ids, syncedAt); err != nil {
		return err
	}

	var members []memberRow
	type change struct {
		memberKey
		what string
	}
	var changes []change
	current := map[memberKey]bool{}
	for _, g := range groups {
		for _, d := range g.Members {
			k := memberKey{g.ID, d}
			if current[k] {
				continue
			}
			current[k] = true
			if _, ok := prev[k]; ok {
				// Stored as it is: rewriting it would change nothing
				// but snapshot_at, at a row per member every cycle.
				continue
			}
			changes = append(changes, change{k, ChangeAdded})
			members = append(members, memberRow{k, 0, synced})
		}
	}
	for k, joined := range prev {
		if !current[k] {
			members = append(members, memberRow{k, 1, joined})
			changes = append(changes, change{k, ChangeRemoved})
		}
	}
	sort.Slice(changes, func(i, j int) bool {
		if changes[i].group != changes[j].group {
			return changes[i].group < changes[j].group
		}
		return changes[i].device < changes[j].device
	})
	err = c.insertRows(ctx, TableDeviceGroupChanges, "group_id, device_id, change, at, version", len(changes), func(i int) []any {
		ch := changes[i]
		return []any{ch.group, ch.device, ch.what, synced, version}
	})
	if err != nil {
		return err
	}
	return c.insertRows(ctx, TableDeviceGroupMembers, "group_id, device_id, removed, joined_at, snapshot_at, version", len(members), func(i int) []any {
		m := members[i]
		return []any{m.group, m.device, m.removed, clampTime(m.joined), synced, version}
	})
}

// WriteEventLogs stores event logs. A log stored twice (a retry, a crash
// before its event's mark was committed) is one row under FINAL.
func (c *Metadata) WriteEventLogs(ctx context.Context, logs []metadata.EventLog) error {
	version := c.nextVersion()
	now := time.Now().UTC()
	return c.insertRows(ctx, TableEventLogs, "event, id, created_at, created_at_us, log, synced_at, version", len(logs), func(i int) []any {
		l := logs[i]
		var us int64
		if !l.CreatedAt.IsZero() {
			us = l.CreatedAt.UnixMicro()
		}
		return []any{l.Event, l.ID, clampTime(l.CreatedAt), us, jsonText(l.Raw), now, version}
	})
}
