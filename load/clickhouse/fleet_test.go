package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// queryStrings runs a query whose columns are all strings (or castable by
// the query) and returns each row joined by "|", sorted.
func queryStrings(t *testing.T, c *Client, query string) []string {
	t.Helper()
	rows, err := c.Conn().Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		cols := rows.Columns()
		vals := make([]string, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		out = append(out, strings.Join(vals, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestWriteDeviceGroupsKeepsTheCurrentMembershipAndItsHistory(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	t1 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	t2 := t1.Add(5 * time.Minute)
	first := []pipeline.DeviceGroup{
		{ID: "g1", Label: "north", Organization: "o1", Tags: []string{"x"}, CreatedAt: t1, Members: []string{"A", "B"}},
		{ID: "g2", Label: "south", Organization: "o1", Members: []string{"C"}},
	}
	if err := c.WriteDeviceGroups(ctx, first, t1); err != nil {
		t.Fatal(err)
	}
	// A leaves g1, D joins it, g2 is deleted in the source.
	second := []pipeline.DeviceGroup{{ID: "g1", Label: "north-renamed", Organization: "o1", Tags: []string{"x", "y"}, CreatedAt: t1, Members: []string{"B", "D"}}}
	if err := c.WriteDeviceGroups(ctx, second, t2); err != nil {
		t.Fatal(err)
	}
	current := queryStrings(t, c, "SELECT group_id, device_id, toString(joined_at) FROM "+c.Table(TableDeviceGroupMembers)+" FINAL WHERE removed = 0")
	if want := []string{"g1|B|2026-11-20 10:00:00", "g1|D|2026-11-20 10:05:00"}; !reflect.DeepEqual(current, want) {
		t.Fatalf("current membership %q, want %q (B keeps its joined_at)", current, want)
	}
	removed := queryStrings(t, c, "SELECT group_id, device_id, toString(snapshot_at) FROM "+c.Table(TableDeviceGroupMembers)+" FINAL WHERE removed = 1")
	if want := []string{"g1|A|2026-11-20 10:05:00", "g2|C|2026-11-20 10:05:00"}; !reflect.DeepEqual(removed, want) {
		t.Fatalf("removed memberships %q, want %q", removed, want)
	}
	groups := queryStrings(t, c, "SELECT id, label, toString(tags), toString(deleted) FROM "+c.Table(TableDeviceGroups)+" FINAL")
	if want := []string{"g1|north-renamed|['x','y']|0", "g2|south|[]|1"}; !reflect.DeepEqual(groups, want) {
		t.Fatalf("device_groups %q, want %q", groups, want)
	}
	history := queryStrings(t, c, "SELECT toString(at), group_id, device_id, change FROM "+c.Table(TableDeviceGroupChanges)+" FINAL")
	want := []string{
		"2026-11-20 10:00:00|g1|A|added", "2026-11-20 10:00:00|g1|B|added", "2026-11-20 10:00:00|g2|C|added",
		"2026-11-20 10:05:00|g1|A|removed", "2026-11-20 10:05:00|g1|D|added", "2026-11-20 10:05:00|g2|C|removed",
	}
	if !reflect.DeepEqual(history, want) {
		t.Fatalf("membership history %q, want %q", history, want)
	}
	// The same snapshot again changes nothing in the history.
	if err := c.WriteDeviceGroups(ctx, second, t2.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if again := queryStrings(t, c, "SELECT toString(at), group_id, device_id, change FROM "+c.Table(TableDeviceGroupChanges)+" FINAL"); !reflect.DeepEqual(again, want) {
		t.Fatalf("an unchanged snapshot altered the history: %q", again)
	}
}

func TestDeletedFlagsHoldUnderFinalWithAFilter(t *testing.T) {
	// A filter on a non-key column must apply after FINAL picked the newest
	// row (an old server could move it before), or a deleted device would
	// still read as live.
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	now := time.Now()
	if err := c.WriteDevices(ctx, []pipeline.Device{{ID: "A", Organization: "o1"}, {ID: "B", Organization: "o2"}}, now); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkDevicesDeleted(ctx, []string{"B"}); err != nil {
		t.Fatal(err)
	}
	live, err := c.LiveDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"A": "o1"}; !reflect.DeepEqual(live, want) {
		t.Fatalf("LiveDevices = %v, want %v", live, want)
	}
	// Written again (it came back in the source): live again.
	if err := c.WriteDevices(ctx, []pipeline.Device{{ID: "B", Organization: "o2"}}, now); err != nil {
		t.Fatal(err)
	}
	if live, _ := c.LiveDevices(ctx); len(live) != 2 {
		t.Fatalf("a device written after being marked deleted is not live: %v", live)
	}
}

func TestWriteOrganizationsMarksTheMissingOnesDeleted(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	orgs := []pipeline.Organization{{ID: "o1", Label: "org-00", Name: "Org 0", CreatedAt: created}, {ID: "o2", Label: "org-01"}}
	if err := c.WriteOrganizations(ctx, orgs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteOrganizations(ctx, orgs[:1], time.Now()); err != nil {
		t.Fatal(err)
	}
	got := queryStrings(t, c, "SELECT id, label, name, toString(toUnixTimestamp(created_at)), toString(deleted) FROM "+c.Table(TableOrganizations)+" FINAL")
	if want := []string{fmt.Sprintf("o1|org-00|Org 0|%d|0", created.Unix()), "o2|org-01||0|1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("organizations %q, want %q", got, want)
	}
	if err := c.WriteOrganizations(ctx, nil, time.Now()); err != nil {
		t.Fatalf("an empty organization list: %v", err)
	}
	if got := queryStrings(t, c, "SELECT id FROM "+c.Table(TableOrganizations)+" FINAL WHERE deleted = 0"); len(got) != 0 {
		t.Fatalf("after an empty list, live organizations %q", got)
	}
}

func TestEventLogsRoundTrip(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	ts := time.Date(2026, 11, 20, 12, 0, 0, 123456000, time.UTC)
	logs := []pipeline.EventLog{
		{Event: "~overheat", ID: "l1", CreatedAt: ts, Raw: []byte(`{"id":"l1","message":"hot","value":31.5}`)},
		{Event: "~overheat", ID: "l2", CreatedAt: ts, Raw: []byte(`{"id":"l2"}`)},
	}
	for range 2 { // a retried write leaves one row per log
		if err := c.WriteEventLogs(ctx, logs); err != nil {
			t.Fatal(err)
		}
	}
	got := queryStrings(t, c, "SELECT event, id, toString(created_at_us), toString(created_at), log FROM "+c.Table(TableEventLogs)+" FINAL")
	want := []string{
		fmt.Sprintf("~overheat|l1|%d|2026-11-20 12:00:00|{\"id\":\"l1\",\"message\":\"hot\",\"value\":31.5}", ts.UnixMicro()),
		fmt.Sprintf("~overheat|l2|%d|2026-11-20 12:00:00|{\"id\":\"l2\"}", ts.UnixMicro()),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("event_logs %q, want %q", got, want)
	}
}
