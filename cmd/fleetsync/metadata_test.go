package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// setSync adds lines (YAML, unindented) to the config's sync section.
func (w *world) setSync(lines string) {
	w.editConfig(func(s string) string { return strings.Replace(s, "sync:\n", "sync:\n"+indent(lines), 1) })
}

// setSource adds lines to the config's source section.
func (w *world) setSource(lines string) {
	w.editConfig(func(s string) string { return strings.Replace(s, "source:\n", "source:\n"+indent(lines), 1) })
}

// table names a table of the world's database.
func (w *world) table(name string) string { return fmt.Sprintf("`%s`.`%s`", w.db, name) }

// rows runs a query and returns each row's cells rendered with %v and
// joined by "|", keyed by the first cell.
func (w *world) rows(query string) map[string]string {
	w.t.Helper()
	rs, err := w.conn.Query(context.Background(), query)
	if err != nil {
		w.t.Fatalf("%s: %v", query, err)
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		n := len(rs.Columns())
		vals := make([]any, n)
		for i, ct := range rs.ColumnTypes() {
			vals[i] = cellTarget(ct.DatabaseTypeName())
		}
		if err := rs.Scan(vals...); err != nil {
			w.t.Fatalf("%s: %v", query, err)
		}
		cells := make([]string, n)
		for i, v := range vals {
			cells[i] = fmt.Sprint(cellValue(v))
		}
		if _, dup := out[cells[0]]; dup {
			w.t.Fatalf("%s: key %q appears twice", query, cells[0])
		}
		out[cells[0]] = strings.Join(cells, "|")
	}
	if err := rs.Err(); err != nil {
		w.t.Fatal(err)
	}
	return out
}

func cellTarget(typ string) any {
	switch typ {
	case "String":
		return new(string)
	case "Array(String)":
		return new([]string)
	case "UInt8":
		return new(uint8)
	case "UInt32":
		return new(uint32)
	case "UInt64":
		return new(uint64)
	case "Int64":
		return new(int64)
	case "Float64":
		return new(float64)
	case "DateTime('UTC')", "DateTime":
		return new(time.Time)
	}
	panic("no scan target for " + typ)
}

func cellValue(v any) any {
	switch p := v.(type) {
	case *string:
		return *p
	case *[]string:
		return fmt.Sprintf("%q", *p)
	case *uint8:
		return *p
	case *uint32:
		return *p
	case *uint64:
		return *p
	case *int64:
		return *p
	case *float64:
		return *p
	case *time.Time:
		return p.UTC().Format(time.RFC3339)
	}
	return v
}

// compareRows fails the test with the first differences between the rows
// the source implies and the rows stored.
func compareRows(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for k, wv := range want {
		switch gv, ok := got[k]; {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing %s", wv))
		case gv != wv:
			diffs = append(diffs, fmt.Sprintf("stored %s\n      want %s", gv, wv))
		}
	}
	for k, gv := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("unexpected %s", gv))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s differ from the source in %d rows (want %d, stored %d):\n  %s", what, len(diffs), len(want), len(got), strings.Join(diffs[:min(6, len(diffs))], "\n  "))
	}
}

func compactJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(normalizeAny(v))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// normalizeAny round-trips v through JSON so that maps compare by content
// (encoding/json sorts map keys).
func normalizeAny(v any) any {
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	default:
		b, _ = json.Marshal(x)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return "not JSON: " + string(b)
	}
	if out == nil {
		return map[string]any{}
	}
	return out
}

func unix(t time.Time) string { return fmt.Sprint(uint32(t.Unix())) }

// checkDevicesAndVariables compares the live devices and variables with the
// source's, field by field.
func (w *world) checkDevicesAndVariables() {
	w.t.Helper()
	wantDev, wantVar := map[string]string{}, map[string]string{}
	for _, d := range w.sim.Devices() {
		tags := d.Tags
		if tags == nil {
			tags = []string{}
		}
		wantDev[d.ID] = strings.Join([]string{d.ID, d.Label, d.Name, d.Description, compactJSON(w.t, d.Properties),
			fmt.Sprintf("%q", tags), d.Organization, unix(d.CreatedAt), fmt.Sprint(d.LastActivityMs)}, "|")
		for _, v := range d.Variables {
			color, _ := v.Properties["_color"].(string)
			wantVar[v.ID] = strings.Join([]string{v.ID, d.ID, d.Label, v.Label, v.Name, compactJSON(w.t, v.Properties), color,
				unix(v.CreatedAt), fmt.Sprint(v.LastActivityMs)}, "|")
		}
	}
	// Properties are stored as the source's JSON text; compare by content.
	compareRows(w.t, "live devices", wantDev, compactCell(w.t, 4, 9, w.rows("SELECT id, label, name, description, properties, tags, organization_id, toUnixTimestamp(created_at), last_activity_ms FROM "+
		w.table("devices")+" FINAL WHERE deleted = 0")))
	compareRows(w.t, "live variables", wantVar, compactCell(w.t, 5, 9, w.rows("SELECT id, device_id, device_label, label, name, properties, color, toUnixTimestamp(created_at), last_activity_ms FROM "+
		w.table("variables")+" FINAL WHERE deleted = 0")))
}

// compactCell rewrites cell i of every row of n cells (as rows renders
// them), JSON text as the source sent it, in compactJSON's form, so that
// rows compare by content; the last cell may hold "|".
func compactCell(t testing.TB, i, n int, rows map[string]string) map[string]string {
	t.Helper()
	for k, v := range rows {
		cells := strings.SplitN(v, "|", n)
		cells[i] = compactJSON(t, cells[i])
		rows[k] = strings.Join(cells, "|")
	}
	return rows
}

// checkGroups compares the live groups and the current membership with the
// source's.
func (w *world) checkGroups() {
	w.t.Helper()
	wantGroups, wantMembers := map[string]string{}, map[string]string{}
	for _, g := range w.sim.Groups() {
		tags := g.Tags
		if tags == nil {
			tags = []string{}
		}
		wantGroups[g.ID] = strings.Join([]string{g.ID, g.Label, g.Name, g.Organization, fmt.Sprintf("%q", tags), unix(g.CreatedAt)}, "|")
		for _, d := range g.Devices {
			wantMembers[g.ID+"/"+d] = g.ID + "/" + d
		}
	}
	compareRows(w.t, "live device groups", wantGroups, w.rows("SELECT id, label, name, organization_id, tags, toUnixTimestamp(created_at) FROM "+
		w.table("device_groups")+" FINAL WHERE deleted = 0"))
	compareRows(w.t, "current group memberships", wantMembers, w.rows("SELECT concat(group_id, '/', device_id) FROM "+
		w.table("device_group_members")+" FINAL WHERE removed = 0"))
}

func (w *world) checkOrganizations() {
	w.t.Helper()
	want := map[string]string{}
	for _, o := range w.sim.Organizations() {
		want[o.ID] = strings.Join([]string{o.ID, o.Label, o.Name, unix(o.CreatedAt)}, "|")
	}
	compareRows(w.t, "live organizations", want, w.rows("SELECT id, label, name, toUnixTimestamp(created_at) FROM "+
		w.table("organizations")+" FINAL WHERE deleted = 0"))
}

// checkEventLogs compares the stored logs of the configured events (key →
// event id) with the source's.
func (w *world) checkEventLogs(keys map[string]string) int {
	w.t.Helper()
	byID := map[string]fleetsim.Event{}
	for _, e := range w.sim.Events() {
		byID[e.ID] = e
	}
	want := map[string]string{}
	for key, id := range keys {
		for _, l := range byID[id].Logs {
			raw := compactJSON(w.t, map[string]any{"id": l.ID, "createdAt": l.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000Z"),
				"value": l.Value, "device": l.DeviceID, "variable": l.VariableID, "message": l.Message})
			want[key+"/"+l.ID] = strings.Join([]string{key + "/" + l.ID, fmt.Sprint(l.CreatedAt.UnixMicro()), raw}, "|")
		}
	}
	compareRows(w.t, "event logs", want, compactCell(w.t, 2, 3, w.rows("SELECT concat(event, '/', id), created_at_us, log FROM "+w.table("event_logs")+" FINAL")))
	return len(want)
}

// eventKeys configures every event of the fleet, the first by ~label and
// the others by id.
func (w *world) eventKeys() map[string]string {
	keys := map[string]string{}
	for i, e := range w.sim.Events() {
		if i == 0 {
			keys["~"+e.Label] = e.ID
		} else {
			keys[e.ID] = e.ID
		}
	}
	var list []string
	for k := range keys {
		list = append(list, fmt.Sprintf("%q", k))
	}
	sort.Strings(list)
	w.setSync("events: [" + strings.Join(list, ", ") + "]")
	return keys
}

func TestMetadataTablesEqualTheSourceAfterASync(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 5, Variables: 3, Points: 40, Span: 2 * 24 * time.Hour}})
	// An account-scoped token may read the organizations; small pages make
	// every listing and the event log cursor take several requests.
	w.sim.AddToken("account-token", fleetsim.TokenAccount, time.Hour)
	w.writeToken("account-token")
	w.setSource("page_size: 2")
	keys := w.eventKeys()
	_, logs := w.sync()
	w.checkDevicesAndVariables()
	w.checkGroups()
	w.checkOrganizations()
	if n := w.checkEventLogs(keys); n < 25 {
		t.Fatalf("only %d event logs in the source; the first event alone should have 25", n)
	}
	if strings.Contains(logs, "scoped token") {
		t.Fatalf("the organization hint was logged with an account-scoped token:\n%s", lastLines(logs, 5))
	}
}

// TestRunListsGroupsAndOrganizationsOncePerMetadataRefresh: a daemon walks
// the devices every cycle but lists the groups and the organizations (a
// 403 with this token) on its first cycle only, within the default
// sync.metadata_refresh (1h), so that its steady state costs the device and
// variable pages (issue 37).
func TestRunListsGroupsAndOrganizationsOncePerMetadataRefresh(t *testing.T) {
	t.Parallel() // waits on the schedule, not the CPU (harness_test.go, "Parallel tests")
	w := newWorld(t, worldOpts{sync: `schedule: "@every 1s"`})
	d := w.startDaemon(nil)
	var body string
	poll(t, 90*time.Second, "three cycles to succeed", func() bool {
		body = d.metrics()
		v, ok := metricValue(body, `fleetsync_cycles_total{result="success"}`)
		return ok && v >= 3
	})
	d.cancel()
	select {
	case <-d.done:
		if d.code != 0 {
			t.Fatalf("run exited %d on cancellation, want 0; logs:\n%s", d.code, lastLines(d.stderr.String(), 10))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30s of its context being cancelled")
	}
	// The requests of each endpoint, whatever their status.
	requests := func(endpoint string) float64 {
		var n float64
		for _, line := range strings.Split(grepLines(body, "fleetsync_api_requests_total{"), "\n") {
			if strings.Contains(line, `endpoint="`+endpoint+`"}`) {
				v, _ := metricValue(line, "fleetsync_api_requests_total")
				n += v
			}
		}
		return n
	}
	devices, groups, orgs := requests("devices"), requests("device_groups"), requests("organizations")
	if devices < 3 || groups != 1 || orgs != 1 {
		t.Fatalf("over 3 cycles: %v device, %v group and %v organization list requests; want a device list a cycle and the others once:\n%s",
			devices, groups, orgs, grepLines(body, "fleetsync_api_requests_total{"))
	}
}

func TestMetadataFollowsMembershipChangesPropertyPatchesAndDeletions(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 6, Variables: 2, Points: 30, Span: 24 * time.Hour}})
	_, logs := w.sync()
	if n := strings.Count(logs, "organization- or account-scoped token"); n != 1 {
		t.Fatalf("with an ordinary token the organization hint was logged %d times, want once:\n%s", n, lastLines(logs, 8))
	}
	if got := w.rows("SELECT id FROM " + w.table("organizations")); len(got) != 0 {
		t.Fatalf("organizations stored without permission to read them: %v", got)
	}
	w.checkDevicesAndVariables() // organization_id comes through the groups' organizations
	w.checkGroups()

	api, err := fleetapi.New(fleetapi.Config{BaseURL: w.http.URL, Tokens: fleetapi.StaticToken(testToken)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var group fleetsim.Group
	for _, g := range w.sim.Groups() {
		if len(g.Devices) >= 2 {
			group = g
			break
		}
	}
	if group.ID == "" {
		t.Fatal("no group with two members in the fleet")
	}
	devices := w.sim.Devices()
	leaving := group.Devices[0]
	var joining, patched, deleted string
	for _, d := range devices {
		switch {
		case containsString(group.Devices, d.ID):
		case joining == "":
			joining = d.ID
		case patched == "":
			patched = d.ID
		}
	}
	deleted = group.Devices[1]
	if err := api.RemoveDevices(ctx, "~"+group.Label, []fleetapi.DeviceRef{fleetapi.DeviceByID(leaving)}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.AssignDevices(ctx, group.ID, []fleetapi.DeviceRef{fleetapi.DeviceByID(joining)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := api.UpdateDevice(ctx, patched, map[string]any{"properties": map[string]any{"city": "Bremen", "floor": 3}, "tags": []string{"moved"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.sim.DeleteDevice(deleted); err != nil {
		t.Fatal(err)
	}
	var deletedVars []string
	for _, d := range devices {
		if d.ID == deleted {
			for _, v := range d.Variables {
				deletedVars = append(deletedVars, v.ID)
			}
		}
	}

	w.sync()
	w.checkDevicesAndVariables() // includes the patched properties and tags
	w.checkGroups()              // leaving and the deleted device are out, joining is in
	props := w.rows(fmt.Sprintf("SELECT id, properties, tags FROM %s FINAL WHERE id = '%s'", w.table("devices"), patched))[patched]
	if !strings.Contains(props, `"city":"Bremen"`) || !strings.Contains(props, `"floor":3`) || !strings.Contains(props, `"model"`) || !strings.HasSuffix(props, `["moved"]`) {
		t.Fatalf("patched device stored as %s; want the merged properties and the new tags", props)
	}
	gone := w.rows(fmt.Sprintf("SELECT id, deleted FROM %s FINAL WHERE id = '%s'", w.table("devices"), deleted))
	if gone[deleted] != deleted+"|1" {
		t.Fatalf("the deleted device is stored as %q, want it marked deleted", gone[deleted])
	}
	goneVars := w.rows(fmt.Sprintf("SELECT id, deleted FROM %s FINAL WHERE device_id = '%s'", w.table("variables"), deleted))
	for _, id := range deletedVars {
		if goneVars[id] != id+"|1" {
			t.Fatalf("variable %s of the deleted device is stored as %q, want it marked deleted", id, goneVars[id])
		}
	}
	history := w.rows(fmt.Sprintf("SELECT concat(device_id, ':', change) FROM %s FINAL WHERE group_id = '%s'",
		w.table("device_group_member_changes"), group.ID))
	for _, want := range []string{leaving + ":removed", joining + ":added", deleted + ":removed"} {
		if _, ok := history[want]; !ok {
			t.Fatalf("the membership history of the second cycle lacks %s: %v", want, history)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestEventLogsAreLoadedOnceAcrossCycles(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 3, Variables: 2, Points: 20, Span: 24 * time.Hour}})
	w.setSource("page_size: 4")
	keys := w.eventKeys()
	w.sync()
	n := w.checkEventLogs(keys)
	stored := func() string {
		return w.rows("SELECT toString(count()) FROM " + w.table("event_logs"))[fmt.Sprint(n)]
	}
	if stored() == "" {
		t.Fatalf("event_logs holds other than %d rows before FINAL after one cycle: %v", n, w.rows("SELECT count() FROM "+w.table("event_logs")))
	}
	w.sim.ResetCounters()
	_, logs := w.sync()
	w.checkEventLogs(keys)
	if stored() == "" {
		t.Fatalf("the second cycle inserted event logs again: %v rows before FINAL, %d logs", w.rows("SELECT count() FROM "+w.table("event_logs")), n)
	}
	if !strings.Contains(logs, `"new_logs":0`) {
		t.Fatalf("the second cycle did not report 0 new logs:\n%s", lastLines(logs, 6))
	}
	// Newest first in fleetsim: one page per event tells the reader stopped at its mark.
	requests := w.sim.Counters()["GET /api/v2.0/events/{event_key}/logs/ 200"]
	if requests != len(keys) {
		t.Fatalf("the second cycle made %d event log requests for %d events, want one each", requests, len(keys))
	}
	// The marks sit on each event's newest log.
	marks := w.rows("SELECT event, hwm_us FROM " + w.table("event_state") + " FINAL")
	for key, id := range keys {
		for _, e := range w.sim.Events() {
			if e.ID == id && len(e.Logs) > 0 {
				if want := fmt.Sprintf("%s|%d", key, e.Logs[0].CreatedAt.UnixMicro()); marks[key] != want {
					t.Fatalf("mark of %s is %q, want %q", key, marks[key], want)
				}
			}
		}
	}
}

func TestScopeChangeStartsNewVariablesFromTheFloorAndStopsRemovedOnes(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 6, Variables: 2, Points: 60, Span: 10 * 24 * time.Hour}})
	var group fleetsim.Group
	for _, g := range w.sim.Groups() {
		if len(g.Devices) >= 1 && len(g.Devices) < 6 {
			group = g
			break
		}
	}
	var outside fleetsim.Device
	for _, d := range w.sim.Devices() {
		if !containsString(group.Devices, d.ID) && len(d.Variables) > 0 && len(w.sim.Points(d.Variables[0].ID)) > 0 {
			outside = d
			break
		}
	}
	if group.ID == "" || outside.ID == "" {
		t.Fatal("the fleet lacks a group and a device outside it")
	}
	scoped := func(devices []string) map[pointKey]pointVal {
		vars := map[string]bool{}
		for _, d := range w.sim.Devices() {
			if containsString(devices, d.ID) {
				for _, v := range d.Variables {
					vars[v.ID] = true
				}
			}
		}
		out := map[pointKey]pointVal{}
		for k, v := range w.expected() {
			if vars[k.variable] {
				out[k] = v
			}
		}
		return out
	}
	check := func(want map[pointKey]pointVal) {
		t.Helper()
		got := w.loaded()
		var diffs []string
		for k := range want {
			if _, ok := got[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("missing %s@%d", k.variable, k.ts))
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("unexpected %s@%d", k.variable, k.ts))
			}
		}
		if len(diffs) > 0 {
			sort.Strings(diffs)
			t.Fatalf("%d points differ from the scoped source (want %d, got %d): %s", len(diffs), len(want), len(got), strings.Join(diffs[:min(6, len(diffs))], "; "))
		}
	}

	base, err := os.ReadFile(w.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	w.setSync(fmt.Sprintf("device_groups: [%q]", "~"+group.Label))
	w.sync()
	inGroup := scoped(group.Devices)
	check(inGroup)

	// New scope: the one device outside the group. A point added to a
	// device of the old scope is not read any more.
	member := w.sim.Devices()
	var old fleetsim.Device
	for _, d := range member {
		if d.ID == group.Devices[0] {
			old = d
		}
	}
	if err := w.sim.AddPoints(old.Variables[0].ID, []fleetsim.SimPoint{{TimestampMs: time.Now().UnixMilli(), Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.cfgPath, base, 0o600); err != nil {
		t.Fatal(err)
	}
	w.setSync(fmt.Sprintf("devices: [%q]", outside.ID))
	w.sync()
	want := scoped([]string{outside.ID})
	for k, v := range inGroup {
		want[k] = v // loaded under the old scope, kept
	}
	check(want)
	// Devices that left the scope are not deleted.
	for _, id := range group.Devices {
		if got := w.rows(fmt.Sprintf("SELECT id, deleted FROM %s FINAL WHERE id = '%s'", w.table("devices"), id))[id]; got != id+"|0" {
			t.Fatalf("device %s, out of scope now, is stored as %q; want it live", id, got)
		}
	}
}

func TestCookbookQueriesRunOnTheWarehouse(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 4, Variables: 4, Points: 200, Span: 3 * 24 * time.Hour}})
	w.sync()
	queries := cookbookQueries(t)
	if len(queries) < 4 {
		t.Fatalf("the README's SQL cookbook has %d queries, want at least 4", len(queries))
	}
	for _, q := range queries {
		sql := strings.ReplaceAll(q.sql, "fleet.", "`"+w.db+"`.")
		rows, err := w.conn.Query(context.Background(), strings.TrimSuffix(strings.TrimSpace(sql), ";"))
		if err != nil {
			t.Fatalf("cookbook query %q fails: %v\n%s", q.title, err, sql)
		}
		n := 0
		for rows.Next() {
			n++
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			t.Fatalf("cookbook query %q: %v", q.title, err)
		}
		if n == 0 {
			t.Fatalf("cookbook query %q returns no rows on a synced fleet:\n%s", q.title, sql)
		}
		switch {
		case strings.HasPrefix(q.title, "Points of every device currently in a group"):
			w.checkGroupPointsQuery(sql)
		case strings.HasPrefix(q.title, "Latest position of each device"):
			w.checkLatestPositionQuery(sql)
		}
	}
}

// checkGroupPointsQuery compares the cookbook's "points of every device in a
// group" with the source's points of that group's devices.
func (w *world) checkGroupPointsQuery(sql string) {
	w.t.Helper()
	m := regexp.MustCompile(`label = '([^']+)'`).FindStringSubmatch(sql)
	if m == nil {
		w.t.Fatalf("the group query names no group label:\n%s", sql)
	}
	var members []string
	for _, g := range w.sim.Groups() {
		if g.Label == m[1] {
			members = g.Devices
		}
	}
	vars := map[string]bool{}
	for _, d := range w.sim.Devices() {
		if containsString(members, d.ID) {
			for _, v := range d.Variables {
				vars[v.ID] = true
			}
		}
	}
	want := 0
	for k := range w.expected() {
		if vars[k.variable] {
			want++
		}
	}
	got := w.rows("SELECT toString(count()) FROM (" + strings.TrimSuffix(strings.TrimSpace(sql), ";") + ")")
	if want == 0 || len(got) != 1 || got[fmt.Sprint(want)] == "" {
		w.t.Fatalf("the group query returns %v points for group %s (%d devices); the source has %d", got, m[1], len(members), want)
	}
}

// checkLatestPositionQuery compares the cookbook's latest position per
// device with the source's newest point carrying lat and lng.
func (w *world) checkLatestPositionQuery(sql string) {
	w.t.Helper()
	type pos struct {
		ts       int64
		lat, lng float64
	}
	newest := map[string]pos{}
	label := map[string]string{}
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			label[v.ID] = d.Label
		}
	}
	for k, p := range w.expected() {
		lat, ok1 := p.context["lat"].(float64)
		lng, ok2 := p.context["lng"].(float64)
		if ok1 && ok2 && k.ts > newest[label[k.variable]].ts {
			newest[label[k.variable]] = pos{k.ts, lat, lng}
		}
	}
	want := map[string]string{}
	for dev, p := range newest {
		want[dev] = fmt.Sprintf("%s|%v|%v", dev, p.lat, p.lng)
	}
	got := w.rows("SELECT device_label, assumeNotNull(last_lat), assumeNotNull(last_lng) FROM (" + strings.TrimSuffix(strings.TrimSpace(sql), ";") + ")")
	if len(want) == 0 {
		w.t.Fatal("the fleet has no position points")
	}
	compareRows(w.t, "latest positions from the cookbook query", want, got)
}

type cookbookQuery struct{ title, sql string }

// cookbookQueries extracts the ```sql blocks of the README's "SQL cookbook"
// section, each titled by the paragraph before it.
func cookbookQueries(t *testing.T) []cookbookQuery {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "### SQL cookbook")
	if start < 0 {
		t.Fatal("README.md has no \"### SQL cookbook\" section")
	}
	text = text[start:]
	if end := strings.Index(text[1:], "\n## "); end >= 0 {
		text = text[:end+1]
	}
	var out []cookbookQuery
	title := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "```sql" {
			var sql []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				sql = append(sql, lines[i])
			}
			out = append(out, cookbookQuery{title, strings.Join(sql, "\n")})
			continue
		}
		if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "#") {
			title = strings.TrimSpace(l)
		}
	}
	return out
}
