package clickhouse

import (
	"context"
	"fmt"
	"hash/fnv"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
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
	first := []metadata.DeviceGroup{
		{ID: "g1", Label: "north", Organization: "o1", Tags: []string{"x"}, CreatedAt: t1, Members: []string{"A", "B"}},
		{ID: "g2", Label: "south", Organization: "o1", Members: []string{"C"}},
	}
	if err := c.Metadata().WriteDeviceGroups(ctx, first, t1); err != nil {
		t.Fatal(err)
	}
	// A leaves g1, D joins it, g2 is deleted in the source.
	second := []metadata.DeviceGroup{{ID: "g1", Label: "north-renamed", Organization: "o1", Tags: []string{"x", "y"}, CreatedAt: t1, Members: []string{"B", "D"}}}
	if err := c.Metadata().WriteDeviceGroups(ctx, second, t2); err != nil {
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
	if err := c.Metadata().WriteDeviceGroups(ctx, second, t2.Add(5*time.Minute)); err != nil {
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
	if err := c.Metadata().WriteDevices(ctx, []pipeline.Device{{ID: "A", Organization: "o1"}, {ID: "B", Organization: "o2"}}, now); err != nil {
		t.Fatal(err)
	}
	if err := c.Metadata().MarkDevicesDeleted(ctx, []string{"B"}); err != nil {
		t.Fatal(err)
	}
	live, err := c.Metadata().LiveDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"A": "o1"}; !reflect.DeepEqual(live, want) {
		t.Fatalf("LiveDevices = %v, want %v", live, want)
	}
	// Written again (it came back in the source): live again.
	if err := c.Metadata().WriteDevices(ctx, []pipeline.Device{{ID: "B", Organization: "o2"}}, now); err != nil {
		t.Fatal(err)
	}
	if live, _ := c.Metadata().LiveDevices(ctx); len(live) != 2 {
		t.Fatalf("a device written after being marked deleted is not live: %v", live)
	}
}

func TestWriteOrganizationsMarksTheMissingOnesDeleted(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	orgs := []metadata.Organization{{ID: "o1", Label: "org-00", Name: "Org 0", CreatedAt: created}, {ID: "o2", Label: "org-01"}}
	if err := c.Metadata().WriteOrganizations(ctx, orgs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := c.Metadata().WriteOrganizations(ctx, orgs[:1], time.Now()); err != nil {
		t.Fatal(err)
	}
	got := queryStrings(t, c, "SELECT id, label, name, toString(toUnixTimestamp(created_at)), toString(deleted) FROM "+c.Table(TableOrganizations)+" FINAL")
	if want := []string{fmt.Sprintf("o1|org-00|Org 0|%d|0", created.Unix()), "o2|org-01||0|1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("organizations %q, want %q", got, want)
	}
	if err := c.Metadata().WriteOrganizations(ctx, nil, time.Now()); err != nil {
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
	logs := []metadata.EventLog{
		{Event: "~overheat", ID: "l1", CreatedAt: ts, Raw: []byte(`{"id":"l1","message":"hot","value":31.5}`)},
		{Event: "~overheat", ID: "l2", CreatedAt: ts, Raw: []byte(`{"id":"l2"}`)},
	}
	for range 2 { // a retried write leaves one row per log
		if err := c.Metadata().WriteEventLogs(ctx, logs); err != nil {
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

// writeChangedVariables stores a walk of pages through changedVariables
// with hash and returns what it wrote and found missing.
func writeChangedVariables(t *testing.T, c *Client, at time.Time, hash func(string) idHash, pages ...[]pipeline.Variable) metadata.Diff {
	t.Helper()
	ctx := context.Background()
	ch, err := c.Metadata().changedVariables(ctx, at, hash)
	if err != nil {
		t.Fatal(err)
	}
	var diff metadata.Diff
	for _, page := range pages {
		n, err := ch.Write(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		diff.Written += n
	}
	if diff.Missing, err = ch.Missing(ctx); err != nil {
		t.Fatal(err)
	}
	return diff
}

// TestWriteChangedWritesOnlyWhatDiffersFromTheLiveRows: the server's
// fingerprint of a stored row equals fleetsync's of the row it would
// write, for every column and awkward value (so a repeated walk writes
// nothing), and differs as soon as one column does; rows marked deleted,
// changed by hand or missing are written again, and the live rows the
// walk lacks come back with their device.
func TestWriteChangedWritesOnlyWhatDiffersFromTheLiveRows(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	t1 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	devices := []pipeline.Device{
		{ID: "A", Label: "dev-a", Name: "Dev A", Description: "d", URL: "http://x/a", Properties: []byte(`{"k":"v","_color":"#fff"}`),
			Tags: []string{"x", "y:z", ""}, CreatedAt: t1.Add(time.Second / 3), LastActivityMs: 1700000000123, Organization: "o1"},
		{ID: "B", Label: "dev-b", Name: "ünïcödé\x00nul", Properties: []byte("null")},
		{ID: "C", Label: "dev-c", CreatedAt: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), Tags: []string{}},
	}
	vars := []pipeline.Variable{
		{ID: "A1", DeviceID: "A", DeviceLabel: "dev-a", Label: "t", Name: "T", Properties: []byte(`{"_color":"#f00"}`), CreatedAt: t1, LastActivityMs: 5},
		{ID: "A2", DeviceID: "A", DeviceLabel: "dev-a", Label: "h", Properties: []byte(`{"_color":3}`)},
		{ID: "B1", DeviceID: "B", DeviceLabel: "dev-b", Label: "t", LastActivityMs: -1},
		{ID: "C1", DeviceID: "C", DeviceLabel: "dev-c", Label: "12:ab", Name: "3:"},
	}
	write := func(ds []pipeline.Device, vs []pipeline.Variable) (dd, vd metadata.Diff) {
		t.Helper()
		dd, err := c.Metadata().WriteChangedDevices(ctx, ds, t1)
		if err != nil {
			t.Fatal(err)
		}
		return dd, writeChangedVariables(t, c, t1, newIDHash(), vs[:1], vs[1:])
	}
	if dd, vd := write(devices, vars); dd.Written != 3 || vd.Written != 4 || len(dd.Missing)+len(vd.Missing) != 0 {
		t.Fatalf("first walk wrote %+v and %+v, want every row and nothing missing", dd, vd)
	}
	if dd, vd := write(devices, vars); dd.Written != 0 || vd.Written != 0 || len(dd.Missing)+len(vd.Missing) != 0 {
		t.Fatalf("the same walk again wrote %+v and %+v, want nothing (the server's fingerprints differ from fleetsync's)", dd, vd)
	}

	// One column of one object at a time.
	changes := []func(ds []pipeline.Device, vs []pipeline.Variable){
		func(ds []pipeline.Device, _ []pipeline.Variable) { ds[0].Tags = []string{"x", "y", ":z", ""} },
		func(ds []pipeline.Device, _ []pipeline.Variable) { ds[0].Organization = "o2" },
		func(ds []pipeline.Device, _ []pipeline.Variable) { ds[1].LastActivityMs = 1 },
		func(ds []pipeline.Device, _ []pipeline.Variable) { ds[2].Description = "now described" },
		func(_ []pipeline.Device, vs []pipeline.Variable) { vs[0].Properties = []byte(`{"_color":"#0f0"}`) },
		func(_ []pipeline.Device, vs []pipeline.Variable) { vs[1].DeviceLabel = "dev-a2" },
		func(_ []pipeline.Device, vs []pipeline.Variable) { vs[3].CreatedAt = t1 },
		func(_ []pipeline.Device, vs []pipeline.Variable) { vs[3].Label, vs[3].Name = "12", ":ab3:" },
	}
	for k, change := range changes {
		ds, vs := slices.Clone(devices), slices.Clone(vars)
		change(ds, vs)
		dd, vd := write(ds, vs)
		if dd.Written+vd.Written != 1 {
			t.Fatalf("change %d: wrote %d devices and %d variables, want the one changed row", k, dd.Written, vd.Written)
		}
		devices, vars = ds, vs
	}

	// Deleted, changed by hand, or gone from the table: written again.
	if err := c.Metadata().MarkVariablesDeleted(ctx, []string{"A1"}); err != nil {
		t.Fatal(err)
	}
	// A hand-made row of B1 that replaces the stored one and is older
	// than fleetsync's next write.
	if err := c.Conn().Exec(ctx, "INSERT INTO "+c.Table(TableVariables)+" (id, device_id, label, version) SELECT 'B1', 'B', 'by hand', max(version) + 1 FROM "+c.Table(TableVariables)+" WHERE id = 'B1'"); err != nil {
		t.Fatal(err)
	}
	if _, vd := write(devices, vars); vd.Written != 2 {
		t.Fatalf("after A1 was marked deleted and B1 changed by hand, wrote %d variables, want 2", vd.Written)
	}
	if got := queryStrings(t, c, "SELECT id, label, toString(deleted) FROM "+c.Table(TableVariables)+" FINAL WHERE id IN ('A1', 'B1')"); !reflect.DeepEqual(got, []string{"A1|t|0", "B1|t|0"}) {
		t.Fatalf("rows of A1 and B1 %v, want both as the walk has them, live", got)
	}

	// A walk without C and C1: they come back as missing, C1 with its device.
	dd, vd := write(devices[:2], vars[:3])
	if dd.Written != 0 || len(dd.Missing) != 1 || dd.Missing[0].ID != "C" {
		t.Fatalf("devices without C: %+v, want C missing and nothing written", dd)
	}
	if vd.Written != 0 || len(vd.Missing) != 1 || !slices.Contains(vd.Missing, metadata.StoredRef{ID: "C1", DeviceID: "C"}) {
		t.Fatalf("variables without C1: %+v, want C1 of C missing", vd)
	}
}

// fewKeys and oneKey are storedIndex hashes that make ids share keys, so
// that only check tells their rows apart.
func fewKeys(id string) idHash {
	h := fnv.New64a()
	h.Write([]byte(id))
	return idHash{key: h.Sum64() % 3, check: h.Sum64()}
}

func oneKey(id string) idHash {
	h := fnv.New64a()
	h.Write([]byte(id))
	return idHash{key: 42, check: h.Sum64()}
}

// TestChangedVariablesComparesEachVariableWithItsOwnStoredRow: one walk
// given page by page, whatever the keys of the ids (random, three for
// all, one for all): an unchanged variable costs nothing, a changed one
// is written, a new one is written and not missing, one given twice is
// compared the second time with what the first stored (written again only
// when it changed in between, and then the last one stands), a stored
// variable the walk lacks is missing with its device, and a row another
// writer inserts meanwhile is not.
func TestChangedVariablesComparesEachVariableWithItsOwnStoredRow(t *testing.T) {
	for _, tc := range []struct {
		name string
		hash func(string) idHash
	}{{"random keys", newIDHash()}, {"three keys", fewKeys}, {"one key", oneKey}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, chtest.Shared(t), nil)
			ctx := context.Background()
			t1 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
			var stored []pipeline.Variable
			for i := range 10 {
				dev := fmt.Sprintf("D%d", i%2)
				stored = append(stored, pipeline.Variable{ID: fmt.Sprintf("V%d", i), DeviceID: dev, DeviceLabel: "dev-" + dev, Label: fmt.Sprintf("var-%d", i)})
			}
			if err := c.Metadata().WriteVariables(ctx, stored, t1); err != nil {
				t.Fatal(err)
			}
			changed := func(v pipeline.Variable) pipeline.Variable { v.Label += "-renamed"; return v }
			ch, err := c.Metadata().changedVariables(ctx, t1.Add(time.Minute), tc.hash)
			if err != nil {
				t.Fatal(err)
			}
			pages := [][]pipeline.Variable{
				// V0-V5 as stored; V6 changed; V8 twice as stored; V9 changed.
				{stored[0], stored[1], stored[2], stored[8], stored[3], stored[8]},
				{stored[4], stored[5], changed(stored[6]), changed(stored[9])},
				// N1 is new; V9 again, as changed before; V6 back as
				// stored; V7 never comes.
				{{ID: "N1", DeviceID: "D0", DeviceLabel: "dev-D0", Label: "new"}, changed(stored[9]), stored[6]},
			}
			written := 0
			for _, page := range pages {
				n, err := ch.Write(ctx, page)
				if err != nil {
					t.Fatal(err)
				}
				written += n
			}
			if written != 4 {
				t.Errorf("the walk wrote %d variables, want 4 (V6 twice, V9, N1)", written)
			}
			// Another writer's row, inserted after the walk began.
			if err := c.Metadata().WriteVariables(ctx, []pipeline.Variable{{ID: "N2", DeviceID: "D1"}}, t1); err != nil {
				t.Fatal(err)
			}
			missing, err := ch.Missing(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := []metadata.StoredRef{{ID: "V7", DeviceID: "D1"}}; !reflect.DeepEqual(missing, want) {
				t.Errorf("Missing = %v, want %v", missing, want)
			}
			got := queryStrings(t, c, "SELECT id, label FROM "+c.Table(TableVariables)+" FINAL WHERE id IN ('V6', 'V8', 'V9', 'N1')")
			if want := []string{"N1|new", "V6|var-6", "V8|var-8", "V9|var-9-renamed"}; !reflect.DeepEqual(got, want) {
				t.Errorf("rows after the walk %q, want %q", got, want)
			}
		})
	}
}

// TestChangedVariablesAfterAWalkThatWasNotGivenAnything: every live row is
// missing, and a row marked deleted is not.
func TestChangedVariablesAfterAWalkThatWasNotGivenAnything(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	vars := []pipeline.Variable{{ID: "A1", DeviceID: "A"}, {ID: "A2", DeviceID: "A"}, {ID: "B1", DeviceID: "B"}}
	if err := c.Metadata().WriteVariables(ctx, vars, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := c.Metadata().MarkVariablesDeleted(ctx, []string{"A2"}); err != nil {
		t.Fatal(err)
	}
	diff := writeChangedVariables(t, c, time.Now(), oneKey)
	slices.SortFunc(diff.Missing, func(a, b metadata.StoredRef) int { return strings.Compare(a.ID, b.ID) })
	if want := []metadata.StoredRef{{ID: "A1", DeviceID: "A"}, {ID: "B1", DeviceID: "B"}}; diff.Written != 0 || !reflect.DeepEqual(diff.Missing, want) {
		t.Fatalf("an empty walk: wrote %d, missing %v; want nothing written and %v missing", diff.Written, diff.Missing, want)
	}
}

// TestChangedVariablesReadsTheTableAgainOnlyWhenARowWasNotShown: a walk
// that showed every live row (a cycle in which nothing was deleted) has
// nothing missing without a second read of the table, so Missing answers
// even on a cancelled context; one that lacks a row reads it again, and
// fails on that context.
func TestChangedVariablesReadsTheTableAgainOnlyWhenARowWasNotShown(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	vars := []pipeline.Variable{{ID: "A1", DeviceID: "A"}, {ID: "A2", DeviceID: "A"}, {ID: "B1", DeviceID: "B"}}
	if err := c.Metadata().WriteVariables(ctx, vars, time.Now()); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		walk    []pipeline.Variable
		readErr bool
	}{{vars, false}, {vars[:2], true}} {
		ch, err := c.Metadata().changedVariables(ctx, time.Now(), newIDHash())
		if err != nil {
			t.Fatal(err)
		}
		// Shown twice, so that a row counts once however often it comes.
		for range 2 {
			if n, err := ch.Write(ctx, tc.walk); err != nil || n != 0 {
				t.Fatalf("Write of the stored rows: %d written, %v", n, err)
			}
		}
		missing, err := ch.Missing(cancelled)
		if got := err != nil; got != tc.readErr || len(missing) != 0 {
			t.Fatalf("walk of %d of 3 rows: Missing on a cancelled context = %v, %v; want a read (an error) %v", len(tc.walk), missing, err, tc.readErr)
		}
	}
}

// TestStoredIndexBytesPerRow: the index of 10^6 stored variables, built as
// a cycle builds it (one row at a time from the stream), costs about 24
// bytes a row, where their ids alone would cost 80 and more.
func TestStoredIndexBytesPerRow(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 10^6 entries")
	}
	const rows = 1_000_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := storedIndex{hash: newIDHash()}
	id := make([]byte, 0, 64)
	for i := range rows {
		id = fmt.Appendf(id[:0], "6a1f%020d", i) // the length of a service's ids
		x.add(string(id), uint64(i)*0x9e3779b97f4a7c15)
	}
	x.seal()
	runtime.GC()
	runtime.ReadMemStats(&after)
	perRow := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / rows
	t.Logf("storedIndex: %.1f bytes a stored row at %d rows", perRow, rows)
	if perRow > 28 {
		t.Errorf("storedIndex costs %.1f bytes a row, want at most 28", perRow)
	}
	runtime.KeepAlive(&x)
}
