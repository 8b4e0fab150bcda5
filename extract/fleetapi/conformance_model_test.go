package fleetapi

// The data model: identifiers, timestamps, devices, variables, points and
// groups. Each test names the spec rule it checks; the harness is in
// conformance_test.go.

import (
	"encoding/json"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// ---- Identifiers ----

func TestSpec_ObjectIdIsAcceptedWhereverAnIdIsExpected(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.client(StaticToken(tokAccount), nil)
	d := e.sim.Devices()[0]
	if got, err := c.Device(bg, d.ID); err != nil || got.ID != d.ID {
		t.Errorf("device by id: %+v %v", got, err)
	}
	g := e.sim.Groups()[0]
	if got, err := c.DeviceGroup(bg, g.ID); err != nil || got.ID != g.ID {
		t.Errorf("group by id: %+v %v", got, err)
	}
	o := e.sim.Organizations()[0]
	if got, err := c.Organization(bg, o.ID); err != nil || got.ID != o.ID {
		t.Errorf("organization by id: %+v %v", got, err)
	}
	v := d.Variables[0]
	if got, err := c.Variable(bg, v.ID); err != nil || got.ID != v.ID {
		t.Errorf("variable by id: %+v %v", got, err)
	}
	ev := e.sim.Events()[0]
	n := 0
	if err := c.EventLogs(bg, ev.ID, 0, func(EventLog) error { n++; return nil }); err != nil || n != len(ev.Logs) {
		t.Errorf("event logs by id: %d entries, want %d (%v)", n, len(ev.Logs), err)
	}
}

func TestSpec_LabelKeyIsAcceptedInDeviceEventDeviceGroupAndOrganizationPaths(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.client(StaticToken(tokAccount), nil)
	for _, d := range e.sim.Devices() { // includes "kühlwagen münchen-0001" and "trailer north 0002"
		got, err := c.Device(bg, LabelKey(d.Label))
		if err != nil || got.ID != d.ID {
			t.Errorf("device ~%s: %+v %v", d.Label, got, err)
		}
	}
	g := e.sim.Groups()[0]
	if got, err := c.DeviceGroup(bg, LabelKey(g.Label)); err != nil || got.ID != g.ID {
		t.Errorf("group ~%s: %+v %v", g.Label, got, err)
	}
	o := e.sim.Organizations()[0]
	if got, err := c.Organization(bg, LabelKey(o.Label)); err != nil || got.ID != o.ID {
		t.Errorf("organization ~%s: %+v %v", o.Label, got, err)
	}
	ev := e.sim.Events()[0]
	n := 0
	if err := c.EventLogs(bg, LabelKey(ev.Label), 0, func(EventLog) error { n++; return nil }); err != nil || n != len(ev.Logs) {
		t.Errorf("event ~%s logs: %d, want %d (%v)", ev.Label, n, len(ev.Logs), err)
	}
}

func TestSpec_VariableLabelIsAddressedOnlyNestedUnderItsDevice(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	for _, d := range e.sim.Devices()[:2] {
		for _, v := range d.Variables {
			got, err := c.DeviceVariable(bg, LabelKey(d.Label), v.Label)
			if err != nil || got.ID != v.ID || got.DeviceID != d.ID {
				t.Errorf("variable ~%s of ~%s: %+v %v", v.Label, d.Label, got, err)
			}
		}
	}
	// The same label under two devices names two variables.
	d0, d1 := e.sim.Devices()[0], e.sim.Devices()[1]
	a, _ := c.DeviceVariable(bg, d0.ID, d0.Variables[0].Label)
	b, _ := c.DeviceVariable(bg, d1.ID, d0.Variables[0].Label)
	if a.ID == "" || a.ID == b.ID {
		t.Errorf("label %q resolved to %q under both devices", d0.Variables[0].Label, a.ID)
	}
}

func TestSpec_TopLevelVariableLabelKeyGives400001(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	_, err := e.ordinary().Variable(bg, "~temperature")
	ae := apiErr(t, err)
	if ae.Status != 400 || ae.Code != CodeValidation || ae.Message != "Validation Error." {
		t.Errorf("got %+v", ae)
	}
	list, ok := ae.Detail.([]any)
	if !ok || len(list) == 0 {
		t.Fatalf("detail %#v, want a list of strings", ae.Detail)
	}
	if s, _ := list[0].(string); !strings.Contains(s, "label") {
		t.Errorf("detail %q does not say the label key is not allowed", s)
	}
	if Retryable(err) {
		t.Error("a 400 must be permanent")
	}
}

// ---- Timestamps ----

func TestSpec_DataPointAndActivityTimestampsArePOSIXMilliseconds(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	err := c.Devices(bg, func(d Device) error {
		if d.LastActivityMs < 1e12 || d.LastActivityMs > e.nowMs() {
			t.Errorf("device %s lastActivity %d is not milliseconds up to now", d.Label, d.LastActivityMs)
		}
		return c.Variables(bg, d, func(v Variable) error {
			if v.LastActivityMs != 0 && (v.LastActivityMs < 1e12 || v.LastActivityMs > e.nowMs()) {
				t.Errorf("variable %s lastActivity %d", v.ID, v.LastActivityMs)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	v := e.busyVariable("temperature", 10)
	lo, hi := e.window()
	rec := seriesOf(t, c, false, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi})
	if len(rec.frames[0]) == 0 {
		t.Fatal("no points")
	}
}

func TestSpec_ResourceMetadataTimestampsAreISO8601InUTC(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.client(StaticToken(tokAccount), nil)
	check := func(what string, got, want time.Time) {
		if got.IsZero() || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("%s createdAt %v, want %v in UTC", what, got, want)
		}
	}
	d := e.sim.Devices()[0]
	dev, err := c.Device(bg, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("device", dev.CreatedAt, d.CreatedAt)
	v, err := c.Variable(bg, d.Variables[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	check("variable", v.CreatedAt, d.Variables[0].CreatedAt)
	o := e.sim.Organizations()[0]
	org, err := c.Organization(bg, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("organization", org.CreatedAt, o.CreatedAt)
	ev := e.sim.Events()[0]
	var logs []EventLog
	if err := c.EventLogs(bg, ev.ID, 0, func(l EventLog) error { logs = append(logs, l); return nil }); err != nil {
		t.Fatal(err)
	}
	check("event log", logs[0].CreatedAt, ev.Logs[0].CreatedAt)
}

// ---- Device ----

func TestSpec_DevicePatchMergesPropertiesKeyByKey(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	d := e.sim.Devices()[0]
	got, err := c.UpdateDevice(bg, d.ID, map[string]any{"properties": map[string]any{"color": "red", "model": "X9"}})
	if err != nil {
		t.Fatal(err)
	}
	var props map[string]any
	if err := json.Unmarshal(got.Properties, &props); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	for k, v := range d.Properties {
		want[k] = v
	}
	want["color"], want["model"] = "red", "X9"
	if canonical(t, props) != canonical(t, want) {
		t.Errorf("properties %s, want %s (keys not sent stay untouched)", canonical(t, props), canonical(t, want))
	}
}

func TestSpec_DevicePatchReplacesTheWholeTagsArray(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	d := e.sim.Devices()[0]
	got, err := c.UpdateDevice(bg, d.ID, map[string]any{"tags": []string{"only"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Tags, ",") != "only" {
		t.Errorf("tags %v, want [only]", got.Tags)
	}
	again, err := c.Device(bg, d.ID)
	if err != nil || strings.Join(again.Tags, ",") != "only" {
		t.Errorf("after re-read: %v %v", again.Tags, err)
	}
}

func TestSpec_DeviceNameMaxLength200(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	d := e.sim.Devices()[0]
	if _, err := c.UpdateDevice(bg, d.ID, map[string]any{"name": strings.Repeat("n", 200)}); err != nil {
		t.Fatalf("a 200-character name was refused: %v", err)
	}
	_, err := c.UpdateDevice(bg, d.ID, map[string]any{"name": strings.Repeat("n", 201)})
	ae := apiErr(t, err)
	detail, ok := ae.Detail.(map[string]any)
	if ae.Status != 400 || ae.Code != CodeValidation || !ok || detail["name"] == nil {
		t.Errorf("got %v; want 400001 with detail keyed by name", err)
	}
}

// ---- Variable ----

func TestSpec_VariableDisplayColourIsTheColorKeyInsideProperties(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.sim.Devices()[0].Variables[0]
	got, err := e.ordinary().Variable(bg, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	var props map[string]any
	_ = json.Unmarshal(got.Properties, &props)
	if props["_color"] == nil || props["_color"] != v.Properties["_color"] {
		t.Errorf("properties %s carry no _color %v", got.Properties, v.Properties["_color"])
	}
}

func TestSpec_GetVariableByIdReturnsTheMostRecentReading(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("position", 10)
	got, err := c.Variable(bg, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	pts := e.sim.Points(v.ID)
	newest := pts[len(pts)-1]
	if got.LastValue == nil || got.LastValue.TsMs != newest.TimestampMs || got.LastValue.Value != newest.Value ||
		canonical(t, got.LastValue.Context) != canonical(t, newest.Context) {
		t.Errorf("last value %+v, want %+v", got.LastValue, newest)
	}
	// The fleet's empty variable has none.
	for _, ev := range e.variables("") {
		if len(e.sim.Points(ev.ID)) == 0 {
			got, err := c.Variable(bg, ev.ID)
			if err != nil || got.LastValue != nil {
				t.Errorf("empty variable: last value %+v, %v", got.LastValue, err)
			}
		}
	}
}

// ---- Data point ----

func TestSpec_PositionContextHoldsLatAndLngNumbersAndValueIsAccuracy(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("position", 10)
	lo, hi := e.window()
	rec := seriesOf(t, e.ordinary(), false, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi})
	for _, p := range rec.frames[0] {
		var pos struct{ Lat, Lng *float64 }
		if err := json.Unmarshal([]byte(p.ctx), &pos); err != nil || pos.Lat == nil || pos.Lng == nil ||
			math.Abs(*pos.Lat) > 90 || math.Abs(*pos.Lng) > 180 {
			t.Fatalf("position context %s: want lat and lng numbers in range (%v)", p.ctx, err)
		}
		if p.v < 0 {
			t.Fatalf("accuracy %v is negative", p.v)
		}
	}
}

func TestSpec_ContextIsAnEmptyObjectWhenThereIsNoContext(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("humidity", 10)
	lo, hi := e.window()
	rec := seriesOf(t, e.ordinary(), false, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi})
	for _, p := range rec.frames[0] {
		if p.ctx != "{}" {
			t.Fatalf("context %q, want {}", p.ctx)
		}
	}
}

// ---- Device group ----

func newGroup(t *testing.T, e *confEnv, c *Client, label string) DeviceGroup {
	t.Helper()
	g, err := c.CreateDeviceGroup(bg, DeviceGroupInput{Label: label, Name: label, Organization: e.sim.Organizations()[0].ID, Tags: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func members(t *testing.T, c *Client, key string) []string {
	t.Helper()
	var ids []string
	if err := c.DeviceGroupDevices(bg, key, func(d Device) error { ids = append(ids, d.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	return ids
}

func TestSpec_ANewDeviceGroupStartsEmpty(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	g := newGroup(t, e, c, "fresh")
	if g.Organization != e.sim.Organizations()[0].ID || len(g.DeviceIDs) != 0 || len(members(t, c, g.ID)) != 0 {
		t.Errorf("new group %+v has members", g)
	}
}

func TestSpec_DeviceGroupPatchContainingDevicesIsSilentlyIgnored(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	g := newGroup(t, e, c, "patched")
	got, err := c.UpdateDeviceGroup(bg, g.ID, map[string]any{"name": "Renamed", "devices": []string{e.sim.Devices()[0].ID}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "Renamed" || len(members(t, c, g.ID)) != 0 {
		t.Errorf("patch: name %q, members %v; want the name changed and devices ignored", got.Name, members(t, c, g.ID))
	}
}

func TestSpec_AssignDevicesAcceptsIdLabelKeyAndObjectFormsMixed(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	g := newGroup(t, e, c, "mixed")
	ds := e.sim.Devices()
	got, err := c.AssignDevices(bg, g.ID, []DeviceRef{DeviceByID(ds[0].ID), DeviceByLabel(ds[1].Label), DeviceByIDObject(ds[2].ID)}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ds[0].ID, ds[1].ID, ds[2].ID}
	sort.Strings(want)
	if m := members(t, c, g.ID); !slices.Equal(m, want) {
		t.Errorf("members %v, want %v", m, want)
	}
	// The response lists the members with url, id, label, name, createdAt.
	if len(got) != 3 || got[0].URL == "" || got[0].Label == "" || got[0].Name == "" || got[0].CreatedAt.IsZero() {
		t.Errorf("assign response %+v", got)
	}
}

func TestSpec_AssignDevicesClearFalseAppendsToTheGroup(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	g := newGroup(t, e, c, "append")
	ds := e.sim.Devices()
	for _, d := range ds[:2] {
		if _, err := c.AssignDevices(bg, g.ID, []DeviceRef{DeviceByID(d.ID)}, false); err != nil {
			t.Fatal(err)
		}
	}
	if m := members(t, c, g.ID); len(m) != 2 {
		t.Errorf("members %v, want both devices", m)
	}
}

func TestSpec_AssignDevicesClearTrueReplacesTheWholeMembership(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	g := newGroup(t, e, c, "replace")
	ds := e.sim.Devices()
	if _, err := c.AssignDevices(bg, g.ID, []DeviceRef{DeviceByID(ds[0].ID), DeviceByID(ds[1].ID)}, false); err != nil {
		t.Fatal(err)
	}
	got, err := c.AssignDevices(bg, g.ID, []DeviceRef{DeviceByID(ds[2].ID)}, true)
	if err != nil {
		t.Fatal(err)
	}
	if m := members(t, c, g.ID); !slices.Equal(m, []string{ds[2].ID}) || len(got) != 1 {
		t.Errorf("members %v (response %d), want exactly [%s]", m, len(got), ds[2].ID)
	}
}

func TestSpec_RemoveDevicesTakesThemOutOfTheGroup(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	g := newGroup(t, e, c, "remove")
	ds := e.sim.Devices()
	if _, err := c.AssignDevices(bg, g.ID, []DeviceRef{DeviceByID(ds[0].ID), DeviceByID(ds[1].ID)}, false); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveDevices(bg, g.ID, []DeviceRef{DeviceByLabel(ds[0].Label)}); err != nil {
		t.Fatal(err)
	}
	if m := members(t, c, g.ID); !slices.Equal(m, []string{ds[1].ID}) {
		t.Errorf("members %v, want [%s]", m, ds[1].ID)
	}
}

func TestSpec_DeleteDeviceGroupDeletesTheGroup(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	g := newGroup(t, e, c, "doomed")
	if err := c.DeleteDeviceGroup(bg, LabelKey("doomed")); err != nil {
		t.Fatal(err)
	}
	_, err := c.DeviceGroup(bg, g.ID)
	if ae := apiErr(t, err); ae.Status != 404 || ae.Code != CodeNotFound {
		t.Errorf("after delete: %v", err)
	}
}

func TestSpec_DeviceGroupsAndTheirMembersArePaginatedLists(t *testing.T) {
	e := newConf(t, fleetsim.Options{Devices: 12, Variables: 1, Points: 5})
	c := e.ordinary() // page size 3
	var groups []DeviceGroup
	if err := c.DeviceGroups(bg, func(g DeviceGroup) error { groups = append(groups, g); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(groups) != len(e.sim.Groups()) {
		t.Errorf("%d groups, want %d", len(groups), len(e.sim.Groups()))
	}
	for _, g := range e.sim.Groups() {
		want := slices.Clone(g.Devices)
		sort.Strings(want)
		if got := members(t, c, g.ID); !slices.Equal(got, want) {
			t.Errorf("group %s members %v, want %v", g.Label, got, want)
		}
	}
}
