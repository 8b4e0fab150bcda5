package fleetapi

// The platform API: read-only fields, OPTIONS, endpoints by token kind,
// filters. Each test names the spec rule it checks; the harness is in
// conformance_test.go.

import (
	"encoding/json"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// ---- Read-only fields and OPTIONS ----

func TestSpec_OptionsReturnsNameAndActionsKeyedByMethod(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	raw, err := e.ordinary().Describe(bg, "/devices/")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Name    string                               `json:"name"`
		Actions map[string]map[string]map[string]any `json:"actions"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	f := d.Actions["GET"]["name"]
	if d.Name == "" || f == nil || f["type"] == nil || f["required"] == nil || f["read_only"] == nil || f["label"] == nil || f["max_length"] == nil {
		t.Errorf("description %s lacks name, actions or field attributes", raw)
	}
}

func TestSpec_ReadOnlyFieldIsAcceptedOnWriteAndIgnored(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	raw, err := c.Describe(bg, "/devices/"+url.PathEscape(e.sim.Devices()[0].ID)+"/")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Actions map[string]map[string]struct {
			ReadOnly bool `json:"read_only"`
		} `json:"actions"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if !d.Actions["PATCH"]["createdAt"].ReadOnly {
		t.Fatalf("createdAt is not read_only in %s", raw)
	}
	dev := e.sim.Devices()[0]
	got, err := c.UpdateDevice(bg, dev.ID, map[string]any{"createdAt": "1999-01-01T00:00:00Z", "id": "forged", "description": "new"})
	if err != nil {
		t.Fatalf("a write with read-only fields was refused: %v", err)
	}
	if got.ID != dev.ID || !got.CreatedAt.Equal(dev.CreatedAt) || got.Description != "new" {
		t.Errorf("read-only fields were not ignored: %+v", got)
	}
}

// ---- Platform API endpoints and token kinds ----

func TestSpec_OrganizationsWithAnOrdinaryTokenGive403Detail(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	err := e.ordinary().Organizations(bg, func(Organization) error { return nil })
	ae := apiErr(t, err)
	if ae.Status != 403 || ae.Code != 0 || ae.Detail == nil || IsRetention(err) || Retryable(err) {
		t.Errorf("got %+v, want a permanent 403 with a detail and no code", ae)
	}
}

func TestSpec_OrganizationObjectNeedsAnOrganizationOrAccountScopedToken(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	o := e.sim.Organizations()[0]
	for _, key := range []string{o.ID, LabelKey(o.Label)} {
		_, err := e.ordinary().Organization(bg, key)
		if ae := apiErr(t, err); ae.Status != 403 || ae.Code != 0 {
			t.Errorf("ordinary token, %s: %v", key, err)
		}
		for _, tok := range []string{tokOrg, tokAccount} {
			got, err := e.client(StaticToken(tok), nil).Organization(bg, key)
			if err != nil || got.ID != o.ID || got.Label != o.Label {
				t.Errorf("token %s, %s: %+v %v", tok, key, got, err)
			}
		}
	}
	var n int
	if err := e.client(StaticToken(tokAccount), nil).Organizations(bg, func(Organization) error { n++; return nil }); err != nil || n != len(e.sim.Organizations()) {
		t.Errorf("account token lists %d organizations (%v), want %d", n, err, len(e.sim.Organizations()))
	}
}

func TestSpec_OrganizationDevicesAndDashboardsWorkWithAnOrdinaryToken(t *testing.T) {
	e := newConf(t, fleetsim.Options{Devices: 7, Variables: 1, Points: 5})
	c := e.ordinary()
	for _, o := range e.sim.Organizations() {
		var ids []string
		err := c.OrganizationDevices(bg, o.ID, func(d Device) error {
			if d.Organization != o.ID {
				t.Errorf("device %s organization %q, want %q", d.ID, d.Organization, o.ID)
			}
			ids = append(ids, d.ID)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, d := range e.sim.Devices() {
			if d.Organization == o.ID {
				want = append(want, d.ID)
			}
		}
		sort.Strings(ids)
		sort.Strings(want)
		if !slices.Equal(ids, want) {
			t.Errorf("organization %s devices %v, want %v", o.Label, ids, want)
		}
		var dash []string
		if err := c.OrganizationDashboards(bg, LabelKey(o.Label), func(d Dashboard) error { dash = append(dash, d.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(dash) != len(o.Dashboards) {
			t.Errorf("organization %s: %d dashboards, want %d", o.Label, len(dash), len(o.Dashboards))
		}
	}
}

func TestSpec_DevicesVariablesAndDeviceVariablesArePaginatedLists(t *testing.T) {
	e := newConf(t, fleetsim.Options{Devices: 10, Variables: 4, Points: 5})
	c := e.ordinary() // page size 3: several pages everywhere
	var devs []Device
	if err := c.Devices(bg, func(d Device) error { devs = append(devs, d); return nil }); err != nil {
		t.Fatal(err)
	}
	want := e.sim.Devices()
	if len(devs) != len(want) {
		t.Fatalf("%d devices, want %d", len(devs), len(want))
	}
	nvars := 0
	for i, d := range devs {
		if d.ID != want[i].ID || d.Label != want[i].Label || strings.Join(d.Tags, ",") != strings.Join(want[i].Tags, ",") {
			t.Errorf("device %d: %+v, want %+v", i, d, want[i])
		}
		var vs []Variable
		if err := c.Variables(bg, d, func(v Variable) error { vs = append(vs, v); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(vs) != len(want[i].Variables) {
			t.Errorf("device %s: %d variables, want %d", d.Label, len(vs), len(want[i].Variables))
		}
		for j, v := range vs {
			if j < len(want[i].Variables) && (v.ID != want[i].Variables[j].ID || v.DeviceID != d.ID || v.DeviceLabel != d.Label) {
				t.Errorf("variable %+v, want %+v", v, want[i].Variables[j])
			}
		}
		nvars += len(vs)
	}
	all := 0
	if err := c.AllVariables(bg, func(Variable) error { all++; return nil }); err != nil || all != nvars {
		t.Errorf("/variables/ gave %d, want %d (%v)", all, nvars, err)
	}
}

// ---- Filters ----

func TestSpec_InvalidFilterSyntaxIsSilentlyIgnored(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	q := c.listQuery()
	q.Set("label__no_such_lookup", "tracker-0000")
	n := 0
	err := listPages(bg, c, epDevices, c.apiURL(platformPrefix, "/devices/", q), func(deviceJSON) error { n++; return nil })
	if err != nil || n != len(e.sim.Devices()) {
		t.Errorf("an invalid filter gave %d devices (%v), want all %d", n, err, len(e.sim.Devices()))
	}
}
