package fleetapi

// The conformance suite runs the client against fleetsim over loopback, one
// test per rule of ../../../shared/spec/fleet-telemetry-api.md, each named
// after the spec's wording. Where the client deliberately has no API for a
// rule (a GET on a POST-only endpoint, a malformed body, a page number), the
// test goes through the client's own request machinery (do, getJSON,
// listPages), so that the error parsing and classification under test are
// the client's.

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetsync/fleetsync/extract/fleetsim"

	"github.com/fleetsync/fleetsync/extract/fleetsim/simtest"
)

const (
	tokOrdinary = "tok-ordinary"
	tokOrg      = "tok-org"
	tokAccount  = "tok-account"
)

// seenRequest is one request as the simulator received it.
type seenRequest struct {
	method, path string
	query        url.Values
	token        string
}

// confEnv is a fleetsim served over loopback, with a log of the requests.
type confEnv struct {
	t     testing.TB
	sim   *fleetsim.Sim
	srv   *httptest.Server
	clock *simtest.Clock

	mu   sync.Mutex
	seen []seenRequest
	// after runs after each request is served (for fault switching).
	after func(r *http.Request, status int)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// newConf starts a small fleet (4 devices × 4 variables × 300 points over a
// day) unless opts sizes it; the clock is fake.
func newConf(t testing.TB, opts fleetsim.Options) *confEnv {
	t.Helper()
	e := &confEnv{t: t, clock: simtest.NewClock(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))}
	if opts.Devices == 0 {
		opts.Devices, opts.Variables, opts.Points = 4, 4, 300
	}
	if opts.Seed == 0 {
		opts.Seed = 7
	}
	if opts.Span == 0 {
		opts.Span = 24 * time.Hour
	}
	opts.Tokens = append(opts.Tokens, tokOrdinary)
	opts.OrgTokens = append(opts.OrgTokens, tokOrg)
	opts.AccountTokens = append(opts.AccountTokens, tokAccount)
	if opts.Now == nil {
		opts.Now = e.clock.Now
	}
	sim, err := fleetsim.New(opts)
	if err != nil {
		t.Fatalf("fleetsim.New: %v", err)
	}
	e.sim = sim
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.seen = append(e.seen, seenRequest{method: r.Method, path: r.URL.Path, query: r.URL.Query(), token: r.Header.Get("X-Auth-Token")})
		after := e.after
		e.mu.Unlock()
		sw := &statusRecorder{ResponseWriter: w}
		defer func() {
			if after != nil {
				after(r, sw.status)
			}
		}()
		sim.ServeHTTP(sw, r)
	}))
	t.Cleanup(func() {
		e.srv.Close()
		sim.Close()
	})
	return e
}

func (e *confEnv) requests() []seenRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.seen)
}

func (e *confEnv) resetRequests() {
	e.mu.Lock()
	e.seen = nil
	e.mu.Unlock()
}

// client builds a client with fast retries and the given token source.
func (e *confEnv) client(tokens TokenSource, mod func(*Config)) *Client {
	e.t.Helper()
	cfg := Config{BaseURL: e.srv.URL, Tokens: tokens, Timeout: 5 * time.Second, MaxElapsed: 20 * time.Second,
		BackoffInitial: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond, PageSize: 3}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg, nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *confEnv) ordinary() *Client { return e.client(StaticToken(tokOrdinary), nil) }

func (e *confEnv) nowMs() int64 { return e.clock.Now().UnixMilli() }

// window is a range inside retention covering every generated in-window
// point.
func (e *confEnv) window() (int64, int64) {
	return e.nowMs() - 48*3600*1000, e.nowMs()
}

// variables returns the fleet's variables of a kind, in list order.
func (e *confEnv) variables(kind string) []fleetsim.Variable {
	var out []fleetsim.Variable
	for _, d := range e.sim.Devices() {
		for _, v := range d.Variables {
			if kind == "" || v.Kind == kind {
				out = append(out, v)
			}
		}
	}
	return out
}

// busyVariable is a variable with at least n points in the window.
func (e *confEnv) busyVariable(kind string, n int) fleetsim.Variable {
	lo, hi := e.window()
	for _, v := range e.variables(kind) {
		if len(e.pointsIn(v.ID, lo, hi)) >= n {
			return v
		}
	}
	e.t.Fatalf("no %q variable with %d points", kind, n)
	return fleetsim.Variable{}
}

// pointsIn is the oracle: the simulator's points of a variable in [lo, hi].
func (e *confEnv) pointsIn(id string, lo, hi int64) []fleetsim.SimPoint {
	var out []fleetsim.SimPoint
	for _, p := range e.sim.Points(id) {
		if p.TimestampMs >= lo && p.TimestampMs <= hi {
			out = append(out, p)
		}
	}
	return out
}

// canonical renders a JSON object text or a map with sorted keys.
func canonical(t *testing.T, v any) string {
	t.Helper()
	var m map[string]any
	switch x := v.(type) {
	case string:
		if err := json.Unmarshal([]byte(x), &m); err != nil {
			t.Fatalf("context %q is not a JSON object: %v", x, err)
		}
	case []byte:
		if err := json.Unmarshal(x, &m); err != nil {
			t.Fatalf("context %q is not a JSON object: %v", x, err)
		}
	case map[string]any:
		m = x
	}
	if m == nil {
		m = map[string]any{}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// samePoints compares decoded points with the oracle, order aside, and
// reports the first few differences.
func samePoints(t *testing.T, what string, got []recPoint, want []fleetsim.SimPoint) {
	t.Helper()
	got = slices.Clone(got)
	sort.Slice(got, func(i, j int) bool { return got[i].ts < got[j].ts })
	want = slices.Clone(want)
	sort.Slice(want, func(i, j int) bool { return want[i].TimestampMs < want[j].TimestampMs })
	if len(got) != len(want) {
		t.Errorf("%s: %d points, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := 0; i < min(len(got), len(want)) && bad < 5; i++ {
		g, w := got[i], want[i]
		if g.ts != w.TimestampMs || g.v != w.Value || canonical(t, g.ctx) != canonical(t, w.Context) {
			t.Errorf("%s: point %d is [%d %v %s], want [%d %v %s]", what, i, g.ts, g.v, g.ctx, w.TimestampMs, w.Value, canonical(t, w.Context))
			bad++
		}
	}
}

func apiErr(t *testing.T, err error) *APIError {
	t.Helper()
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("got %v (%T), want an *APIError", err, err)
	}
	return ae
}

// rawCall sends a request through the client's machinery with a body of
// the test's choosing.
func rawCall(ctx context.Context, c *Client, method, prefix, path string, q url.Values, body []byte, out any) error {
	return c.do(ctx, &call{method: method, endpoint: "test", u: c.apiURL(prefix, path, q), body: body, accept: "application/json",
		handle: func(_ *http.Response, r io.Reader) error {
			if out == nil {
				return nil
			}
			return decodeJSON(r, out)
		}})
}

func seriesOf(t *testing.T, c *Client, joined bool, req SeriesRequest) *recorder {
	t.Helper()
	rec := newRecorder()
	var err error
	if joined {
		err = c.SeriesJoined(context.Background(), req, rec)
	} else {
		err = c.Series(context.Background(), req, rec)
	}
	if err != nil {
		t.Fatalf("series (joined=%v): %v", joined, err)
	}
	return rec
}

var bg = context.Background()

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

// ---- GET values ----

func collectValues(t *testing.T, c *Client, id string, q ValuesQuery) []recPoint {
	t.Helper()
	var out []recPoint
	if err := c.Values(bg, id, q, func(p Point) error {
		out = append(out, recPoint{p.TsMs, p.Value, string(p.Context)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func collectCSV(t *testing.T, c *Client, id string, q ValuesQuery) []recPoint {
	t.Helper()
	var out []recPoint
	if err := c.ValuesCSV(bg, id, q, func(p Point) error {
		out = append(out, recPoint{p.TsMs, p.Value, string(p.Context)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSpec_ValuesJSONIsAPaginatedEnvelopeOfDataPoints(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("position", 50)
	lo, hi := e.window()
	got := collectValues(t, e.ordinary(), v.ID, ValuesQuery{Start: lo, End: hi, PageSize: 40})
	samePoints(t, "values", got, e.pointsIn(v.ID, lo, hi))
	pages := 0
	for _, r := range e.requests() {
		if strings.HasSuffix(r.path, "/values") {
			pages++
		}
	}
	if want := (len(got) + 39) / 40; pages != want {
		t.Errorf("%d pages for %d points of 40, want %d", pages, len(got), want)
	}
}

func TestSpec_ValuesCountMayAppearAsABoolean(t *testing.T) {
	e := newConf(t, fleetsim.Options{CountAsBool: true})
	v := e.busyVariable("temperature", 10)
	lo, hi := e.window()
	got := collectValues(t, e.ordinary(), v.ID, ValuesQuery{Start: lo, End: hi, PageSize: 7})
	samePoints(t, "values", got, e.pointsIn(v.ID, lo, hi))
}

func TestSpec_ValuesJSONByDefaultReturnsTheLast100Points(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 150)
	var first []int64
	u := c.apiURL(dataPrefix, "/variables/"+esc(v.ID)+"/values", nil)
	var page pageEnvelope[valueJSON]
	if err := c.getJSON(bg, epValues, u, &page); err != nil {
		t.Fatal(err)
	}
	for _, p := range page.Results {
		ts, _ := p.Timestamp.Int64()
		first = append(first, ts)
	}
	pts := e.sim.Points(v.ID)
	var want []int64
	for _, p := range pts[len(pts)-100:] {
		want = append(want, p.TimestampMs)
	}
	slices.Sort(first)
	if !slices.Equal(first, want) {
		t.Errorf("default values: %d points %v…, want the last 100", len(first), first[:min(3, len(first))])
	}
}

func TestSpec_ValuesStartAndEndAreInclusive(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("battery", 20)
	lo, hi := e.window()
	pts := e.pointsIn(v.ID, lo, hi)
	a, b := pts[3].TimestampMs, pts[10].TimestampMs
	got := collectValues(t, e.ordinary(), v.ID, ValuesQuery{Start: a, End: b})
	samePoints(t, "values [a, b]", got, pts[3:11])
	csv := collectCSV(t, e.ordinary(), v.ID, ValuesQuery{Start: a, End: b})
	samePoints(t, "csv [a, b]", csv, pts[3:11])
}

func TestSpec_ValuesPageSizeIsHonouredInJSONAndCSV(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 30)
	lo, hi := e.window()
	u := c.apiURL(dataPrefix, "/variables/"+esc(v.ID)+"/values", ValuesQuery{Start: lo, End: hi, PageSize: 7}.values(""))
	var page pageEnvelope[valueJSON]
	if err := c.getJSON(bg, epValues, u, &page); err != nil || len(page.Results) != 7 {
		t.Errorf("JSON page_size 7 gave %d (%v)", len(page.Results), err)
	}
	if got := collectCSV(t, c, v.ID, ValuesQuery{Start: lo, End: hi, PageSize: 7}); len(got) != 7 {
		t.Errorf("CSV page_size 7 gave %d rows", len(got))
	}
}

func TestSpec_CSVPageIsIgnoredAndEveryPageNumberReturnsTheFirstPage(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 30)
	var pages [][]recPoint
	for _, page := range []string{"1", "2", "9"} {
		q := ValuesQuery{PageSize: 5}.values("csv")
		q.Set("page", page)
		var got []recPoint
		err := c.do(bg, &call{method: "GET", endpoint: epValuesCSV, u: c.apiURL(dataPrefix, "/variables/"+esc(v.ID)+"/values", q), csv: true,
			handle: func(_ *http.Response, r io.Reader) error {
				return DecodeValuesCSV(r, func(p Point) error {
					got = append(got, recPoint{p.TsMs, p.Value, string(p.Context)})
					return nil
				})
			}})
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, got)
	}
	if len(pages[0]) != 5 || fmt.Sprint(pages[0]) != fmt.Sprint(pages[1]) || fmt.Sprint(pages[0]) != fmt.Sprint(pages[2]) {
		t.Errorf("CSV pages differ: %v / %v / %v", pages[0], pages[1], pages[2])
	}
}

func TestSpec_CSVWithoutPageSizeOrRangeReturnsEveryRetainedPoint(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	for _, v := range e.variables("") {
		got := collectCSV(t, e.ordinary(), v.ID, ValuesQuery{})
		samePoints(t, "csv of "+v.Label, got, e.pointsIn(v.ID, e.sim.RetentionFloor().UnixMilli(), math.MaxInt64))
	}
}

func TestSpec_CSVHasFourColumnsAndTheValueColumnIsNamedAfterTheLabel(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("humidity", 5)
	var header []string
	err := c.do(bg, &call{method: "GET", endpoint: epValuesCSV, u: c.apiURL(dataPrefix, "/variables/"+esc(v.ID)+"/values", ValuesQuery{PageSize: 2}.values("csv")), csv: true,
		handle: func(resp *http.Response, r io.Reader) error {
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
				t.Errorf("content type %q", ct)
			}
			if cd := resp.Header.Get("Content-Disposition"); cd != "attachment; filename=values_"+v.ID+".csv" {
				t.Errorf("Content-Disposition %q", cd)
			}
			b, _ := io.ReadAll(r)
			header = strings.Split(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]), ",")
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Timestamp", "Human readable date (UTC)", v.Label, "Context"}
	if !slices.Equal(header, want) {
		t.Errorf("header %q, want %q (and no created_at)", header, want)
	}
}

func TestSpec_CSVContextIsPythonBytesLiteral(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	for _, kind := range []string{"position", "temperature", "battery"} {
		v := e.busyVariable(kind, 20)
		lo, hi := e.window()
		got := collectCSV(t, c, v.ID, ValuesQuery{Start: lo, End: hi})
		samePoints(t, "csv "+kind, got, e.pointsIn(v.ID, lo, hi))
	}
	// A context with quotes, a backslash and non-ASCII text survives the
	// Python bytes literal.
	v := e.busyVariable("temperature", 1)
	ts := e.nowMs() - 1000
	ctx := map[string]any{"note": `it's "quoted" \ back`, "city": "München", "n": 1.5}
	if err := e.sim.AddPoints(v.ID, []fleetsim.SimPoint{{TimestampMs: ts, Value: 4.25, Context: ctx}}); err != nil {
		t.Fatal(err)
	}
	got := collectCSV(t, c, v.ID, ValuesQuery{Start: ts, End: ts})
	if len(got) != 1 || canonical(t, got[0].ctx) != canonical(t, ctx) {
		t.Errorf("context read back as %v, want %s", got, canonical(t, ctx))
	}
}

// ---- GET statistics ----

func oracleStat(pts []fleetsim.SimPoint, fn string) (float64, bool) {
	if fn == "count" {
		return float64(len(pts)), true
	}
	if fn == "sum" {
		s := 0.0
		for _, p := range pts {
			s += p.Value
		}
		return s, true
	}
	if len(pts) == 0 {
		return 0, false
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].TimestampMs < pts[j].TimestampMs })
	vals := make([]float64, len(pts))
	for i, p := range pts {
		vals[i] = p.Value
	}
	mean := 0.0
	for _, v := range vals {
		mean += v
	}
	mean /= float64(len(vals))
	switch fn {
	case "mean":
		return mean, true
	case "min":
		return slices.Min(vals), true
	case "max":
		return slices.Max(vals), true
	case "first":
		return vals[0], true
	case "last":
		return vals[len(vals)-1], true
	case "std":
		ss := 0.0
		for _, v := range vals {
			ss += (v - mean) * (v - mean)
		}
		return math.Sqrt(ss / float64(len(vals))), true
	}
	return 0, false
}

func TestSpec_StatisticsImplementsMeanMinMaxSumCountFirstLastStd(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 50)
	lo, hi := e.window()
	pts := e.pointsIn(v.ID, lo, hi)
	for _, fn := range []string{"mean", "min", "max", "sum", "count", "first", "last", "std"} {
		got, ok, err := c.Statistic(bg, v.ID, fn, lo, hi)
		want, wantOK := oracleStat(slices.Clone(pts), fn)
		if err != nil || ok != wantOK || !simtest.Near(got, want) {
			t.Errorf("%s = %v %v %v, want %v %v", fn, got, ok, err, want, wantOK)
		}
	}
	// An empty range has a null mean and a zero count.
	if _, ok, err := c.Statistic(bg, v.ID, "mean", hi+1, hi+2); err != nil || ok {
		t.Errorf("mean of nothing: ok=%v err=%v, want null", ok, err)
	}
}

func TestSpec_UnimplementedStatisticGives200WithAnEmptyObject(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 5)
	lo, hi := e.window()
	for _, fn := range []string{"variance", "stddev", "meen"} {
		_, _, err := e.ordinary().Statistic(bg, v.ID, fn, lo, hi)
		if !errors.Is(err, ErrStatisticNotImplemented) || Retryable(err) {
			t.Errorf("%s: %v", fn, err)
		}
	}
}

// ---- POST aggregation ----

func TestSpec_AggregationAcceptsItsListOfNamesAverageIsMeanAndRawIsTheNewestPoint(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	vs := []string{e.busyVariable("temperature", 20).ID, e.busyVariable("position", 20).ID}
	lo, hi := e.window()
	results := map[string][]AggregateValue{}
	for _, fn := range []string{"mean", "min", "max", "sum", "count", "first", "last", "average", "raw"} {
		got, err := c.Aggregate(bg, AggregationRequest{VariableIDs: vs, Aggregation: fn, Start: lo, End: hi})
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		results[fn] = got
		for i, a := range got {
			if fn == "raw" || fn == "average" {
				continue
			}
			want, _ := oracleStat(e.pointsIn(vs[i], lo, hi), fn)
			if !a.HasValue || !simtest.Near(a.Value, want) {
				t.Errorf("%s of %s = %+v, want %v", fn, vs[i], a, want)
			}
		}
	}
	for i := range vs {
		if results["average"][i].Value != results["mean"][i].Value {
			t.Errorf("average %v != mean %v", results["average"][i].Value, results["mean"][i].Value)
		}
		pts := e.pointsIn(vs[i], lo, hi)
		newest := pts[len(pts)-1]
		raw := results["raw"][i]
		if raw.Value != newest.Value || raw.TsMs != newest.TimestampMs || (raw.Context != nil && canonical(t, []byte(raw.Context)) != canonical(t, newest.Context)) {
			t.Errorf("raw %+v, want the newest point %+v", raw, newest)
		}
	}
}

func TestSpec_AggregationRejectsOtherNamesWithDescriptionStatusMessage400(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 5).ID
	for _, fn := range []string{"variance", "stddev", "std", "median"} {
		_, err := e.ordinary().Aggregate(bg, AggregationRequest{VariableIDs: []string{v}, Aggregation: fn})
		ae := apiErr(t, err)
		if ae.Status != 400 || ae.Description == "" || ae.Message == "" || ae.Code != 0 || Retryable(err) {
			t.Errorf("%s: %+v", fn, ae)
		}
	}
}

func TestSpec_AggregationJoinDataframesTrueAndFalseGiveTheSameAggregates(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	var ids []string
	for _, v := range e.variables("") {
		ids = append(ids, v.ID)
	}
	lo, hi := e.window()
	for _, fn := range []string{"max", "count", "mean"} {
		a, err1 := c.Aggregate(bg, AggregationRequest{VariableIDs: ids, Aggregation: fn, Joined: true, Start: lo, End: hi})
		b, err2 := c.Aggregate(bg, AggregationRequest{VariableIDs: ids, Aggregation: fn, Joined: false, Start: lo, End: hi})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for i := range ids {
			if !a[i].HasValue && (!b[i].HasValue || b[i].Value == 0 && !b[i].HasTs) {
				continue // an empty input joins no row
			}
			if a[i].HasValue != b[i].HasValue || a[i].Value != b[i].Value || a[i].TsMs != b[i].TsMs {
				t.Errorf("%s of %s: joined %+v, per variable %+v", fn, ids[i], a[i], b[i])
			}
		}
	}
}

func TestSpec_AggregationLimitTruncatesTheInputBeforeAggregating(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 20).ID
	lo, hi := e.window()
	five := 5
	got, err := e.ordinary().Aggregate(bg, AggregationRequest{VariableIDs: []string{v}, Aggregation: "count", Start: lo, End: hi, Limit: &five})
	if err != nil || got[0].Value != 5 {
		t.Errorf("count with limit 5 = %+v %v, want 5", got, err)
	}
}

func TestSpec_AggregationPrecisionSetsDecimalPlaces(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 20).ID
	lo, hi := e.window()
	full, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v}, Aggregation: "mean", Start: lo, End: hi})
	if err != nil {
		t.Fatal(err)
	}
	one := 1
	got, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v}, Aggregation: "mean", Start: lo, End: hi, Precision: &one})
	if err != nil {
		t.Fatal(err)
	}
	if want := math.Round(full[0].Value*10) / 10; !simtest.Near(got[0].Value, want) || full[0].Value == want {
		t.Errorf("precision 1: %v from %v, want %v", got[0].Value, full[0].Value, want)
	}
}

func TestSpec_AggregationTzIsAnIANAName(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 5).ID
	if _, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v}, Aggregation: "max", TZ: "Europe/Berlin"}); err != nil {
		t.Errorf("tz Europe/Berlin: %v", err)
	}
	_, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v}, Aggregation: "max", TZ: "Mars/Olympus"})
	if ae := apiErr(t, err); ae.Status != 400 {
		t.Errorf("tz Mars/Olympus: %v", err)
	}
}

// ---- POST raw series ----

func TestSpec_RawSeriesJoinDataframesFalseGivesOneFramePerVariableInRequestOrder(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	var ids []string
	for _, v := range e.variables("") {
		ids = append(ids, v.ID)
	}
	lo, hi := e.window()
	rec := seriesOf(t, e.ordinary(), false, SeriesRequest{VariableIDs: ids, Start: lo, End: hi})
	if len(rec.rows) != len(ids) {
		t.Fatalf("%d frames for %d variables", len(rec.rows), len(ids))
	}
	for i, id := range ids {
		samePoints(t, "frame of "+id, rec.frames[i], e.pointsIn(id, lo, hi))
		if rec.rows[i] != len(rec.frames[i]) {
			t.Errorf("frame %d: %d rows, %d points", i, rec.rows[i], len(rec.frames[i]))
		}
	}
}

func TestSpec_RawSeriesJoinDataframesTrueIsOneOuterJoinedFrameWithNullCells(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	var ids []string
	for _, v := range e.variables("") {
		ids = append(ids, v.ID) // includes the fleet's empty variable
	}
	lo, hi := e.window()
	req := SeriesRequest{VariableIDs: ids, Start: lo, End: hi}
	joined := seriesOf(t, e.ordinary(), true, req)
	for i, id := range ids {
		samePoints(t, "joined frame of "+id, joined.frames[i], e.pointsIn(id, lo, hi))
		if joined.rows[i] != len(e.pointsIn(id, lo, hi)) {
			t.Errorf("variable %d: %d joined rows with a sample, want %d", i, joined.rows[i], len(e.pointsIn(id, lo, hi)))
		}
	}
	// The raw frame: timestamp first and unprefixed, then each variable's
	// block prefixed with its id in request order, null cells where a
	// variable has no sample.
	body, _ := json.Marshal(map[string]any{"variables": ids[:2], "columns": []string{"value.value", "timestamp", "value.context"}, "join_dataframes": true, "start": lo, "end": hi})
	var out struct {
		Columns []string `json:"columns"`
		Results [][]any  `json:"results"`
	}
	if err := rawCall(bg, e.ordinary(), "POST", dataPrefix, "/data/raw/series", nil, body, &out); err != nil {
		t.Fatal(err)
	}
	wantCols := []string{"timestamp", ids[0] + ".value.value", ids[0] + ".value.context", ids[1] + ".value.value", ids[1] + ".value.context"}
	if !slices.Equal(out.Columns, wantCols) {
		t.Errorf("joined columns %q, want %q", out.Columns, wantCols)
	}
	nulls := 0
	for _, row := range out.Results {
		for _, cell := range row {
			if cell == nil {
				nulls++
			}
		}
	}
	if a, b := len(e.pointsIn(ids[0], lo, hi)), len(e.pointsIn(ids[1], lo, hi)); len(out.Results) > max(a, b) && nulls == 0 {
		t.Errorf("outer join of %d and %d points in %d rows has no null cell", a, b, len(out.Results))
	}
}

func TestSpec_RawSeriesPerFrameColumnsArePrefixedWithTheVariableId(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	ids := []string{e.variables("")[0].ID, e.variables("")[1].ID}
	lo, hi := e.window()
	body, _ := json.Marshal(map[string]any{"variables": ids, "columns": []string{"value.context", "timestamp", "value.value"}, "join_dataframes": false, "start": lo, "end": hi})
	var out struct {
		Columns [][]string `json:"columns"`
	}
	if err := rawCall(bg, e.ordinary(), "POST", dataPrefix, "/data/raw/series", nil, body, &out); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		want := []string{id + ".value.context", "timestamp", id + ".value.value"}
		if i >= len(out.Columns) || !slices.Equal(out.Columns[i], want) {
			t.Errorf("frame %d columns %q, want %q", i, out.Columns, want)
		}
	}
}

func TestSpec_RawSeriesCellPositionsAreReadFromTheReturnedColumns(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("position", 10)
	lo, hi := e.window()
	// Ask for the columns in another order than the client's and decode
	// the answer with the client's decoder.
	body, _ := json.Marshal(map[string]any{"variables": []string{v.ID}, "columns": []string{"value.context", "device.label", "value.value", "timestamp"}, "join_dataframes": false, "start": lo, "end": hi})
	rec := newRecorder()
	req := SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi}
	err := e.ordinary().do(bg, &call{method: "POST", endpoint: epRawSeries, u: e.ordinary().apiURL(dataPrefix, "/data/raw/series", nil), body: body,
		handle: func(_ *http.Response, r io.Reader) error { return DecodeSeries(r, req, rec) }})
	if err != nil {
		t.Fatal(err)
	}
	samePoints(t, "reordered columns", rec.frames[0], e.pointsIn(v.ID, lo, hi))
}

func TestSpec_RawSeriesAcceptsAllTenColumns(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("position", 3)
	cols := []string{"value.value", "timestamp", "variable.id", "variable.label", "variable.name", "variable.properties", "value.context", "device.id", "device.name", "device.label"}
	lo, hi := e.window()
	body, _ := json.Marshal(map[string]any{"variables": []string{v.ID}, "columns": cols, "join_dataframes": false, "start": lo, "end": hi, "limit": 2})
	var out struct {
		Columns [][]string `json:"columns"`
		Results [][][]any  `json:"results"`
	}
	if err := rawCall(bg, e.ordinary(), "POST", dataPrefix, "/data/raw/series", nil, body, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Columns) != 1 || len(out.Columns[0]) != 10 || len(out.Results[0]) != 2 || len(out.Results[0][0]) != 10 {
		t.Fatalf("columns %q, %d rows", out.Columns, len(out.Results[0]))
	}
	// Cells are found by the returned columns, never by the request's order.
	row := out.Results[0][0]
	for _, col := range []string{"variable.properties", "value.context"} {
		j := slices.Index(out.Columns[0], v.ID+"."+col)
		if j < 0 {
			t.Errorf("no column %s.%s in %q", v.ID, col, out.Columns[0])
			continue
		}
		if _, ok := row[j].(map[string]any); !ok {
			t.Errorf("%s %#v is not a JSON object", col, row[j])
		}
	}
}

func TestSpec_RawSeriesVariablePropertiesColorGives400(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 3)
	body, _ := json.Marshal(map[string]any{"variables": []string{v.ID}, "columns": []string{"timestamp", "variable.properties.color"}})
	err := rawCall(bg, e.ordinary(), "POST", dataPrefix, "/data/raw/series", nil, body, nil)
	if ae := apiErr(t, err); ae.Status != 400 || Retryable(err) {
		t.Errorf("got %v", err)
	}
}

func TestSpec_RawSeriesLimitIsPerVariableNotPerResponse(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	ids := []string{e.busyVariable("temperature", 20).ID, e.busyVariable("position", 20).ID}
	lo, hi := e.window()
	rec := seriesOf(t, e.ordinary(), false, SeriesRequest{VariableIDs: ids, Start: lo, End: hi, Limit: 7})
	joined := seriesOf(t, e.ordinary(), true, SeriesRequest{VariableIDs: ids, Start: lo, End: hi, Limit: 7})
	for i := range ids {
		if rec.rows[i] != 7 || len(rec.frames[i]) != 7 || joined.rows[i] != 7 {
			t.Errorf("variable %d: %d rows (joined %d), want 7 each", i, rec.rows[i], joined.rows[i])
		}
	}
}

func TestSpec_RawSeriesLimitZeroMeansNoLimit(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 150)
	lo, hi := e.window()
	rec := seriesOf(t, e.ordinary(), false, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi, Limit: 0})
	samePoints(t, "limit 0", rec.frames[0], e.pointsIn(v.ID, lo, hi))
	// With neither bound, limit 0 returns the entire retained series.
	body, _ := json.Marshal(map[string]any{"variables": []string{v.ID}, "columns": []string{"timestamp"}, "join_dataframes": false, "limit": 0})
	var out struct {
		Results [][][]any `json:"results"`
	}
	if err := rawCall(bg, e.ordinary(), "POST", dataPrefix, "/data/raw/series", nil, body, &out); err != nil {
		t.Fatal(err)
	}
	if want := len(e.pointsIn(v.ID, e.sim.RetentionFloor().UnixMilli(), math.MaxInt64)); len(out.Results[0]) != want {
		t.Errorf("limit 0 without bounds: %d rows, want all %d retained", len(out.Results[0]), want)
	}
}

func TestSpec_RawSeriesNegativeLimitGives400(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 3)
	lo, hi := e.window()
	err := e.ordinary().Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi, Limit: -1}, newRecorder())
	if ae := apiErr(t, err); ae.Status != 400 || Retryable(err) {
		t.Errorf("got %v", err)
	}
}

// ---- Time range rules ----

// rawSeriesRows posts a raw series with the given bounds (nil: not sent)
// and returns the row count of each frame.
func rawSeriesRows(t *testing.T, c *Client, ids []string, start, end *int64) []int {
	t.Helper()
	b := map[string]any{"variables": ids, "columns": []string{"timestamp", "value.value"}, "join_dataframes": false}
	if start != nil {
		b["start"] = *start
	}
	if end != nil {
		b["end"] = *end
	}
	body, _ := json.Marshal(b)
	var out struct {
		Results [][][]any `json:"results"`
	}
	if err := rawCall(bg, c, "POST", dataPrefix, "/data/raw/series", nil, body, &out); err != nil {
		t.Fatal(err)
	}
	var n []int
	for _, f := range out.Results {
		n = append(n, len(f))
	}
	return n
}

func TestSpec_NeitherStartNorEndGivesTheLast100ValuesOfEachVariable(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	ids := []string{e.busyVariable("temperature", 150).ID, e.busyVariable("position", 150).ID}
	if got := rawSeriesRows(t, c, ids, nil, nil); !slices.Equal(got, []int{100, 100}) {
		t.Errorf("raw series without bounds: %v rows, want 100 each", got)
	}
	got, err := c.Aggregate(bg, AggregationRequest{VariableIDs: ids, Aggregation: "count"})
	if err != nil || got[0].Value != 100 || got[1].Value != 100 {
		t.Errorf("aggregation count without bounds: %+v %v, want 100 each", got, err)
	}
}

func TestSpec_StartOnlyReadsToTheMostRecentPointWithNoImplicitCap(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 150)
	lo, _ := e.window()
	want := len(e.pointsIn(v.ID, lo, math.MaxInt64))
	if got := rawSeriesRows(t, e.ordinary(), []string{v.ID}, &lo, nil); got[0] != want || want <= 100 {
		t.Errorf("start only: %d rows, want %d (> 100)", got[0], want)
	}
}

func TestSpec_EndOnlyReadsFromTheEarliestPointWithNoImplicitCap(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 150)
	_, hi := e.window()
	want := len(e.pointsIn(v.ID, e.sim.RetentionFloor().UnixMilli(), hi))
	if got := rawSeriesRows(t, e.ordinary(), []string{v.ID}, nil, &hi); got[0] != want || want <= 100 {
		t.Errorf("end only: %d rows, want %d (> 100)", got[0], want)
	}
}

func TestSpec_BothBoundsReadWithinTheRangeInclusiveOnBothEnds(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 150)
	lo, hi := e.window()
	pts := e.pointsIn(v.ID, lo, hi)
	a, b := pts[10].TimestampMs, pts[140].TimestampMs
	rec := seriesOf(t, e.ordinary(), false, SeriesRequest{VariableIDs: []string{v.ID}, Start: a, End: b})
	samePoints(t, "[a, b]", rec.frames[0], pts[10:141])
	agg, err := e.ordinary().Aggregate(bg, AggregationRequest{VariableIDs: []string{v.ID}, Aggregation: "count", Start: a, End: b})
	if err != nil || agg[0].Value != 131 {
		t.Errorf("aggregation count over [a, b] = %+v %v, want 131", agg, err)
	}
}

// ---- Authentication ----

func TestSpec_RequestsCarryTheTokenInTheXAuthTokenHeader(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 10)
	lo, hi := e.window()
	_ = c.Devices(bg, func(Device) error { return nil })
	_ = collectValues(t, c, v.ID, ValuesQuery{Start: lo, End: hi})
	_ = collectCSV(t, c, v.ID, ValuesQuery{Start: lo, End: hi})
	_, _, _ = c.Statistic(bg, v.ID, "mean", lo, hi)
	_, _ = c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v.ID}, Aggregation: "max", Start: lo, End: hi})
	_ = seriesOf(t, c, false, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi})
	reqs := e.requests()
	if len(reqs) < 6 {
		t.Fatalf("only %d requests", len(reqs))
	}
	for _, r := range reqs {
		if r.token != tokOrdinary || r.query.Has("token") {
			t.Errorf("%s %s: header token %q, query %v", r.method, r.path, r.token, r.query)
		}
	}
}

func TestSpec_MissingEmptyWrongAndExpiredTokensAllGiveTheSame401(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	var bodies []string
	record := func(err error) {
		ae := apiErr(t, err)
		if ae.Status != 401 || ae.Code != CodeUnauthorized || Retryable(err) || !IsUnauthorized(err) {
			t.Errorf("got %+v", ae)
		}
		bodies = append(bodies, fmt.Sprint(ae.Code, ae.Message))
	}
	_, err := e.client(StaticToken("wrong"), nil).Device(bg, e.sim.Devices()[0].ID)
	record(err)
	// A missing header, and an empty ?token= on values: the client never
	// sends either, so a client whose base names another host (and thus
	// withholds the header) sends these requests.
	noTok := e.client(StaticToken(tokOrdinary), nil)
	noTok.base = &url.URL{Scheme: "http", Host: "other.invalid"}
	for _, q := range []url.Values{nil, {"token": {""}}} {
		u, _ := url.Parse(e.srv.URL + "/api/v1.6/variables/" + e.variables("")[0].ID + "/values?" + q.Encode())
		err := noTok.do(bg, &call{method: "GET", endpoint: "test", u: u, handle: func(*http.Response, io.Reader) error { return nil }})
		record(err)
	}
	for _, r := range e.requests() {
		if r.path != "/api/v2.0/devices/"+e.sim.Devices()[0].ID+"/" && r.token != "" {
			t.Errorf("a request meant to be without token carried one")
		}
	}
	e.sim.ExpireTokens()
	_, err = e.ordinary().Device(bg, e.sim.Devices()[0].ID)
	record(err)
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Errorf("401 bodies differ: %q", bodies)
		}
	}
}

func TestSpec_AValidTokenWithoutPermissionGives403DetailWithNoCode(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	_, err := e.ordinary().Organization(bg, e.sim.Organizations()[0].ID)
	ae := apiErr(t, err)
	if ae.Status != 403 || ae.Code != 0 || ae.Detail != "You do not have permission to perform this action." || IsUnauthorized(err) {
		t.Errorf("got %+v", ae)
	}
}

func TestSpec_ATokenIsValidForSixHours(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	d := e.sim.Devices()[0].ID
	e.clock.Advance(6*time.Hour - time.Minute)
	if _, err := c.Device(bg, d); err != nil {
		t.Fatalf("a token younger than 6h was refused: %v", err)
	}
	e.clock.Advance(2 * time.Minute)
	if _, err := c.Device(bg, d); !IsUnauthorized(err) {
		t.Errorf("a token older than 6h: %v, want 401", err)
	}
}

func TestSpec_TokenExpiryMidIterationIsRecoveredByReReadingTheTokenFile(t *testing.T) {
	e := newConf(t, fleetsim.Options{Devices: 10, Variables: 1, Points: 5})
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tokOrdinary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := e.client(FileToken(path), nil) // page size 3: four pages
	var ids []string
	err := c.Devices(bg, func(d Device) error {
		ids = append(ids, d.ID)
		if len(ids) == 4 { // on the second page: the token expires and a fresh one is mounted
			e.sim.ExpireTokens()
			e.sim.AddToken("tok-fresh", fleetsim.TokenOrdinary, 0)
			if err := os.WriteFile(path, []byte("tok-fresh\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("iteration failed after the token expired: %v", err)
	}
	if len(ids) != 10 {
		t.Errorf("%d devices, want 10 (no page lost or repeated)", len(ids))
	}
	reqs := e.requests()
	last := reqs[len(reqs)-1]
	if last.token != "tok-fresh" {
		t.Errorf("the last page was read with %q", last.token)
	}
}

// ---- Errors ----

func TestSpec_MalformedJSONBodyGives400Detail(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	err := rawCall(bg, e.ordinary(), "POST", dataPrefix, "/data/raw/series", nil, []byte(`{"variables": [`), nil)
	ae := apiErr(t, err)
	d, _ := ae.Detail.(string)
	if ae.Status != 400 || ae.Code != 0 || !strings.HasPrefix(d, "JSON parse error - ") || Retryable(err) {
		t.Errorf("got %+v", ae)
	}
}

func TestSpec_FailedFieldValidationGives400001WithDetailKeyedByField(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	_, err := e.ordinary().CreateDeviceGroup(bg, DeviceGroupInput{Label: "no-org"})
	ae := apiErr(t, err)
	detail, ok := ae.Detail.(map[string]any)
	if ae.Status != 400 || ae.Code != CodeValidation || ae.Message != "Validation Error." || !ok || detail["organization"] == nil {
		t.Errorf("got %+v", ae)
	}
}

func TestSpec_InvalidEnumValueOnADataAPIPostGivesDescriptionStatusMessage(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	_, err := e.ordinary().Aggregate(bg, AggregationRequest{VariableIDs: []string{e.variables("")[0].ID}, Aggregation: "variance"})
	ae := apiErr(t, err)
	if ae.Status != 400 || ae.Description != "Bad Request" || !strings.Contains(ae.Message, "mean") {
		t.Errorf("got %+v; the message should list the accepted values", ae)
	}
	if line := err.Error(); !strings.Contains(line, "POST /api/v1.6/data/stats/aggregation/") || !strings.Contains(line, "HTTP 400") {
		t.Errorf("Error() = %q", line)
	}
}

func TestSpec_PageNumberPastTheLastPageGives404InvalidPage(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	err := rawCall(bg, c, "GET", platformPrefix, "/devices/", url.Values{"page": {"99"}}, nil, nil)
	ae := apiErr(t, err)
	if ae.Status != 404 || ae.Code != 0 || ae.Detail != "Invalid page." || !IsNotFound(err) || Retryable(err) {
		t.Errorf("got %+v", ae)
	}
}

func TestSpec_UnknownDeviceOrVariableLabelGives404001(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	d := e.sim.Devices()[0]
	_, err1 := c.Device(bg, "~no-such-device")
	_, err2 := c.DeviceVariable(bg, d.ID, "no-such-variable")
	_, err3 := c.Device(bg, LabelKey(e.sim.Groups()[0].Label)) // a label of another kind: wrong ~ key
	for _, err := range []error{err1, err2, err3} {
		ae := apiErr(t, err)
		if ae.Status != 404 || ae.Code != CodeNotFound || ae.Message != "The request was not found." || Retryable(err) {
			t.Errorf("got %+v", ae)
		}
	}
}

func TestSpec_GetOnAPostOnlyDataAPIEndpointGives405001(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	for _, p := range []string{"/data/raw/series", "/data/stats/aggregation/"} {
		err := rawCall(bg, c, "GET", dataPrefix, p, nil, nil, nil)
		ae := apiErr(t, err)
		if ae.Status != 405 || ae.Code != CodeMethodNotAllowed || ae.Detail == nil || Retryable(err) {
			t.Errorf("GET %s: %+v", p, ae)
		}
	}
}

// ---- Retention ----

func TestSpec_RetentionViolationIsRejectedInFullWith403003OnEveryDataRead(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 10)
	floor := e.sim.RetentionFloor().UnixMilli()
	old, now := floor-1000, e.nowMs()
	cases := map[string]func() error{
		"raw series start": func() error {
			return c.Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: old, End: now}, newRecorder())
		},
		"raw series both": func() error {
			return c.Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: old, End: old + 1}, newRecorder())
		},
		"aggregation start": func() error {
			_, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v.ID}, Aggregation: "count", Start: old})
			return err
		},
		"aggregation end": func() error {
			_, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v.ID}, Aggregation: "count", End: old})
			return err
		},
		"statistics": func() error { _, _, err := c.Statistic(bg, v.ID, "count", old, now); return err },
		"values start": func() error {
			return c.Values(bg, v.ID, ValuesQuery{Start: old}, func(Point) error { return nil })
		},
		"values end": func() error {
			return c.Values(bg, v.ID, ValuesQuery{End: old}, func(Point) error { return nil })
		},
		"values both": func() error {
			return c.Values(bg, v.ID, ValuesQuery{Start: old, End: now}, func(Point) error { return nil })
		},
	}
	for name, f := range cases {
		err := f()
		var re *RetentionError
		if !errors.As(err, &re) || re.API.Status != 403 || re.API.Code != CodeRetention || Retryable(err) {
			t.Errorf("%s: got %v, want a permanent *RetentionError (403003)", name, err)
		}
	}
	// Moving the floor forward is enough: the in-window range passes.
	if err := c.Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: floor + 1000, End: now}, newRecorder()); err != nil {
		t.Errorf("in-window range: %v", err)
	}
}

func TestSpec_RetentionViolationInCSVHasACompletelyEmpty403Body(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 10)
	old := e.sim.RetentionFloor().UnixMilli() - 1000
	err := e.ordinary().ValuesCSV(bg, v.ID, ValuesQuery{Start: old}, func(Point) error { return nil })
	var re *RetentionError
	if !errors.As(err, &re) || re.API.Status != 403 || re.API.Code != 0 || re.API.Message != "" {
		t.Errorf("got %v, want a *RetentionError from an empty 403", err)
	}
}

func TestSpec_ASecondsPrecisionTimestampReadsAs1970AndTriggersRetention(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 10)
	secs := e.clock.Now().Add(-time.Hour).Unix()
	err := e.ordinary().Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: secs, End: e.clock.Now().Unix()}, newRecorder())
	if !IsRetention(err) {
		t.Errorf("got %v, want a retention error", err)
	}
}

func TestSpec_DataRetentionWindowIs24MonthsByDefault(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 10)
	now := e.clock.Now()
	c := e.ordinary()
	in := now.Add(-729 * 24 * time.Hour).UnixMilli()
	if _, _, err := c.Statistic(bg, v.ID, "count", in, now.UnixMilli()); err != nil {
		t.Errorf("729 days back: %v", err)
	}
	out := now.Add(-731 * 24 * time.Hour).UnixMilli()
	_, _, err := c.Statistic(bg, v.ID, "count", out, now.UnixMilli())
	var re *RetentionError
	if !errors.As(err, &re) || !strings.Contains(re.API.Message, "24 months") {
		t.Errorf("731 days back: %v, want a 403003 naming the 24-month limit", err)
	}
}

// ---- Limits: pagination ----

func TestSpec_PageSizeDefaultIs50AndPageDefaultIs1(t *testing.T) {
	e := newConf(t, fleetsim.Options{Devices: 60, Variables: 4, Points: 2})
	c := e.ordinary()
	var page pageEnvelope[deviceJSON]
	if err := c.getJSON(bg, epDevices, c.apiURL(platformPrefix, "/devices/", nil), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Results) != 50 || string(page.Results[0].ID) != e.sim.Devices()[0].ID || page.Previous != nil || page.Next == nil {
		t.Errorf("default page: %d results, previous %v, next %v", len(page.Results), page.Previous, page.Next)
	}
	if n, _ := strconvAtoi(string(page.Count)); n != 60 {
		t.Errorf("count %s, want 60", page.Count)
	}
}

func strconvAtoi(s string) (int, error) {
	var n int
	_, err := fmt.Sscan(s, &n)
	return n, err
}

func TestSpec_PageSizeDefaultIs200ForVariables(t *testing.T) {
	e := newConf(t, fleetsim.Options{Devices: 60, Variables: 4, Points: 2})
	c := e.ordinary()
	var page pageEnvelope[variableJSON]
	if err := c.getJSON(bg, epVariables, c.apiURL(platformPrefix, "/variables/", nil), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Results) != 200 {
		t.Errorf("default variables page: %d results, want 200", len(page.Results))
	}
}

func TestSpec_PagingEndsWhenNextIsNull(t *testing.T) {
	e := newConf(t, fleetsim.Options{Devices: 7, Variables: 1, Points: 2})
	n := 0
	if err := e.ordinary().Devices(bg, func(Device) error { n++; return nil }); err != nil || n != 7 {
		t.Fatalf("%d devices, %v", n, err)
	}
	pages := 0
	for _, r := range e.requests() {
		if r.path == "/api/v2.0/devices/" {
			pages++
		}
	}
	if pages != 3 {
		t.Errorf("%d page requests for 7 devices of 3 per page, want 3", pages)
	}
}

// ---- Limits: event-log cursor ----

func TestSpec_EventLogsUseACursorEnvelopeWithoutCount(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	ev := e.sim.Events()[0] // 25 log entries
	var page map[string]json.RawMessage
	u := c.apiURL(platformPrefix, "/events/"+esc(ev.ID)+"/logs/", url.Values{"page_size": {"10"}})
	if err := c.getJSON(bg, epEventLogs, u, &page); err != nil {
		t.Fatal(err)
	}
	if _, has := page["count"]; has || page["next"] == nil || page["results"] == nil || string(page["previous"]) != "null" {
		t.Errorf("first page envelope %v: want next, previous null, results and no count", sortedKeys(page))
	}
	var next string
	_ = json.Unmarshal(page["next"], &next)
	nu, err := c.resolveNext(u, next)
	if err != nil {
		t.Fatal(err)
	}
	var second map[string]json.RawMessage
	if err := c.getJSON(bg, epEventLogs, nu, &second); err != nil {
		t.Fatal(err)
	}
	if string(second["previous"]) == "null" {
		t.Error("the second page has no backwards cursor in previous")
	}
}

// sortedKeys returns the members of an object in sorted order.
func sortedKeys(m map[string]json.RawMessage) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

func TestSpec_EventLogNextIsFollowedVerbatimAndPageSizeHonoured(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	ev := e.sim.Events()[0]
	var ids []string
	if err := c.EventLogs(bg, ev.ID, 10, func(l EventLog) error { ids = append(ids, l.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range ev.Logs {
		want = append(want, l.ID)
	}
	if !slices.Equal(ids, want) {
		t.Errorf("logs %v, want %v", ids, want)
	}
	var logReqs []seenRequest
	for _, r := range e.requests() {
		if strings.HasSuffix(r.path, "/logs/") {
			logReqs = append(logReqs, r)
		}
	}
	if len(logReqs) != 3 {
		t.Fatalf("%d requests for 25 entries of 10", len(logReqs))
	}
	for _, r := range logReqs[1:] {
		if r.query.Get("cursor") == "" || r.query.Has("page") {
			t.Errorf("follow-up request %v did not use the service's cursor", r.query)
		}
	}
}

func TestSpec_EventLogsIgnorePage(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	ev := e.sim.Events()[0]
	var a, b pageEnvelope[json.RawMessage]
	u1 := c.apiURL(platformPrefix, "/events/"+esc(ev.ID)+"/logs/", url.Values{"page_size": {"5"}})
	u2 := c.apiURL(platformPrefix, "/events/"+esc(ev.ID)+"/logs/", url.Values{"page_size": {"5"}, "page": {"3"}})
	if err := c.getJSON(bg, epEventLogs, u1, &a); err != nil {
		t.Fatal(err)
	}
	if err := c.getJSON(bg, epEventLogs, u2, &b); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a.Results) != fmt.Sprint(b.Results) {
		t.Error("page changed the event-log page")
	}
}

func TestSpec_EventLogsHaveNoDefaultPageSize(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	ev := e.sim.Events()[0]
	n := 0
	if err := e.ordinary().EventLogs(bg, ev.ID, -1, func(EventLog) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	var reqs int
	for _, r := range e.requests() {
		if strings.HasSuffix(r.path, "/logs/") {
			reqs++
		}
	}
	if n != len(ev.Logs) || reqs != 1 {
		t.Errorf("without page_size: %d entries in %d requests, want %d in 1", n, reqs, len(ev.Logs))
	}
}

// ---- Robustness against the transport (Retry-After, faults) ----

func TestSpec_RetryAfterIsHonoured(t *testing.T) {
	e := newConf(t, fleetsim.Options{Faults: fleetsim.Faults{RateLimitRate: 1, RetryAfter: "1"}})
	var first, again atomic.Int64
	e.after = func(r *http.Request, status int) {
		switch {
		case status == http.StatusTooManyRequests && first.Load() == 0:
			first.Store(time.Now().UnixNano())
			e.sim.SetFaults(fleetsim.Faults{})
		case status == http.StatusOK && first.Load() != 0 && again.Load() == 0:
			again.Store(time.Now().UnixNano())
		}
	}
	if _, err := e.ordinary().Device(bg, e.sim.Devices()[0].ID); err != nil {
		t.Fatal(err)
	}
	if gap := time.Duration(again.Load() - first.Load()); first.Load() == 0 || gap < time.Second {
		t.Errorf("retried %s after a 429 with Retry-After: 1", gap)
	}
}

func TestSpec_ServerErrorsAndCutBodiesAreRetriedUntilTheDataIsComplete(t *testing.T) {
	e := newConf(t, fleetsim.Options{Faults: fleetsim.Faults{ErrorRate: 0.2, CutRate: 0.3, Seed: 3}})
	c := e.ordinary()
	n := 0
	if err := c.Devices(bg, func(Device) error { n++; return nil }); err != nil || n != 4 {
		t.Fatalf("devices under faults: %d, %v", n, err)
	}
	lo, hi := e.window()
	// The caller's part of the contract: a failed Series is discarded whole
	// and read again when Retryable says so.
	readAll := func(req SeriesRequest) *recorder {
		for attempt := 0; ; attempt++ {
			rec := newRecorder()
			err := c.Series(bg, req, rec)
			if err == nil {
				return rec
			}
			if !Retryable(err) || attempt > 30 {
				t.Fatalf("attempt %d: %v (retryable %v)", attempt, err, Retryable(err))
			}
		}
	}
	var ids []string
	for _, v := range e.variables("") {
		ids = append(ids, v.ID)
		rec := readAll(SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi})
		samePoints(t, "series under faults "+v.ID, rec.frames[0], e.pointsIn(v.ID, lo, hi))
	}
	rec := readAll(SeriesRequest{VariableIDs: ids, Start: lo, End: hi})
	for i, id := range ids {
		samePoints(t, "series under faults "+id, rec.frames[i], e.pointsIn(id, lo, hi))
	}
	cuts, errs := 0, 0
	for k, n := range e.sim.Counters() {
		if strings.HasPrefix(k, "cut ") {
			cuts += n
		}
		if strings.HasSuffix(k, " 500") || strings.HasSuffix(k, " 503") {
			errs += n
		}
	}
	if cuts == 0 || errs == 0 {
		t.Errorf("the faults did not fire (%d cut bodies, %d server errors): the test proves nothing", cuts, errs)
	}
}

func TestSpec_SlowHeadersTimeOutAsARetryableTransportError(t *testing.T) {
	e := newConf(t, fleetsim.Options{Faults: fleetsim.Faults{SlowHeaders: 2 * time.Second, SlowRate: 1}})
	c := e.client(StaticToken(tokOrdinary), func(cfg *Config) { cfg.Timeout = 100 * time.Millisecond; cfg.MaxElapsed = 300 * time.Millisecond })
	_, err := c.Device(bg, e.sim.Devices()[0].ID)
	var te *TransportError
	if !errors.As(err, &te) || !te.Timeout || !Retryable(err) {
		t.Errorf("got %v, want a retryable timeout", err)
	}
}

// ---- Versioning ----

func TestSpec_VersionIsPartOfThePath(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 5)
	lo, hi := e.window()
	_ = c.Devices(bg, func(Device) error { return nil })
	_ = seriesOf(t, c, false, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi})
	for _, r := range e.requests() {
		if !strings.HasPrefix(r.path, "/api/v2.0/") && !strings.HasPrefix(r.path, "/api/v1.6/") {
			t.Errorf("request outside the versioned paths: %s", r.path)
		}
		if strings.HasPrefix(r.path, "/api/v1.6/") != (r.path == "/api/v1.6/data/raw/series") {
			t.Errorf("%s under the wrong family", r.path)
		}
	}
}

func TestSpec_QueryTokenIsAnAlternativeOnValuesAndAggregationOnly(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	// The client itself never sends ?token=; a client whose base names
	// another host withholds the header, so only the query authenticates.
	c := e.client(StaticToken(tokOrdinary), nil)
	c.base = &url.URL{Scheme: "http", Host: "other.invalid"}
	v := e.busyVariable("temperature", 5).ID
	get := func(path string, q url.Values, method string, body []byte) error {
		u, _ := url.Parse(e.srv.URL + path + "?" + q.Encode())
		return c.do(bg, &call{method: method, endpoint: "test", u: u, body: body, handle: func(*http.Response, io.Reader) error { return nil }})
	}
	tok := url.Values{"token": {tokOrdinary}}
	if err := get("/api/v1.6/variables/"+v+"/values", tok, "GET", nil); err != nil {
		t.Errorf("values with ?token=: %v", err)
	}
	agg, _ := json.Marshal(map[string]any{"variables": []string{v}, "aggregation": "count"})
	if err := get("/api/v1.6/data/stats/aggregation/", tok, "POST", agg); err != nil {
		t.Errorf("aggregation with ?token=: %v", err)
	}
	if err := get("/api/v2.0/devices/", tok, "GET", nil); !IsUnauthorized(err) {
		t.Errorf("devices with ?token= only: %v, want 401", err)
	}
}

func TestClientMetricsNameEndpointsNeverIds(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	reg := prometheus.NewRegistry()
	c, err := New(Config{BaseURL: e.srv.URL, Tokens: StaticToken(tokOrdinary), PageSize: 2}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := e.window()
	_ = c.Devices(bg, func(d Device) error {
		return c.Variables(bg, d, func(v Variable) error {
			_, _ = c.Variable(bg, v.ID)
			_, _, _ = c.Statistic(bg, v.ID, "count", lo, hi)
			return c.Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi}, newRecorder())
		})
	})
	allowed := map[string]bool{epDevices: true, epDeviceVariables: true, epVariable: true, epStatistics: true, epRawSeries: true}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "endpoint" {
					seen++
					if !allowed[lp.GetValue()] {
						t.Errorf("%s has endpoint label %q", mf.GetName(), lp.GetValue())
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Error("no metric was recorded")
	}
}

// ---- Rules added by the audit of issue 2 ----

func TestSpec_ValuesPathIsAlsoUsedWithATrailingSlash(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 10)
	lo, hi := e.window()
	for _, path := range []string{"/values", "/values/"} {
		var got []recPoint
		u := c.apiURL(dataPrefix, "/variables/"+esc(v.ID)+path, ValuesQuery{Start: lo, End: hi, PageSize: 7}.values(""))
		err := listPages(bg, c, epValues, u, func(p valueJSON) error {
			if pt, ok := p.point(); ok {
				got = append(got, recPoint{pt.TsMs, pt.Value, string(pt.Context)})
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		samePoints(t, "GET "+path, got, e.pointsIn(v.ID, lo, hi))
		var csvRows int
		err = c.do(bg, &call{method: "GET", endpoint: epValuesCSV, u: c.apiURL(dataPrefix, "/variables/"+esc(v.ID)+path, ValuesQuery{Start: lo, End: hi}.values("csv")), csv: true,
			handle: func(_ *http.Response, r io.Reader) error {
				return DecodeValuesCSV(r, func(Point) error { csvRows++; return nil })
			}})
		if want := len(e.pointsIn(v.ID, lo, hi)); err != nil || csvRows != want {
			t.Errorf("CSV %s: %d points, %v; want %d", path, csvRows, err, want)
		}
	}
}

func TestSpec_CSVHumanReadableDateIsAlwaysUTCWhateverTz(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 5)
	for _, tz := range []string{"", "Asia/Tokyo", "America/New_York"} {
		q := ValuesQuery{PageSize: 5}.values("csv")
		if tz != "" {
			q.Set("tz", tz)
		}
		var rows [][]string
		err := c.do(bg, &call{method: "GET", endpoint: epValuesCSV, u: c.apiURL(dataPrefix, "/variables/"+esc(v.ID)+"/values", q), csv: true,
			handle: func(_ *http.Response, r io.Reader) error {
				all, err := csv.NewReader(r).ReadAll()
				rows = all
				return err
			}})
		if err != nil || len(rows) < 2 {
			t.Fatalf("tz %q: %d rows, %v", tz, len(rows), err)
		}
		for _, row := range rows[1:] {
			ms, _ := strconv.ParseInt(row[0], 10, 64)
			var when time.Time
			for _, layout := range []string{"2006-01-02 15:04:05.999999Z07:00", "2006-01-02 15:04:05.999999", time.RFC3339Nano} {
				if tt, err := time.Parse(layout, row[1]); err == nil {
					when = tt
					break
				}
			}
			if _, off := when.Zone(); when.IsZero() || off != 0 || when.Unix() != ms/1000 {
				t.Errorf("tz %q: timestamp %d has the human readable date %q, want the same instant in UTC", tz, ms, row[1])
			}
		}
	}
}

func TestSpec_DataAPIQueryAndBodySchemaValidationIncludingStartEndRangeErrorsGiveDescriptionStatusMessage(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 5).ID
	lo, hi := e.window()
	backwards, _ := json.Marshal(map[string]any{"variables": []string{v}, "aggregation": "mean", "columns": []string{"timestamp", "value.value"}, "start": hi, "end": lo})
	notInt, _ := json.Marshal(map[string]any{"variables": []string{v}, "aggregation": "mean", "columns": []string{"timestamp", "value.value"}, "start": "yesterday"})
	cases := []struct {
		name, method, path string
		q                  url.Values
		body               []byte
	}{
		{"values start after end", "GET", "/variables/" + v + "/values", url.Values{"start": {fmt.Sprint(hi)}, "end": {fmt.Sprint(lo)}}, nil},
		{"values start not an integer", "GET", "/variables/" + v + "/values", url.Values{"start": {"yesterday"}}, nil},
		{"statistics start after end", "GET", fmt.Sprintf("/variables/%s/statistics/mean/%d/%d", v, hi, lo), nil, nil},
		{"aggregation start after end", "POST", "/data/stats/aggregation/", nil, backwards},
		{"aggregation start not an integer", "POST", "/data/stats/aggregation/", nil, notInt},
		{"raw series start after end", "POST", "/data/raw/series", nil, backwards},
		{"raw series start not an integer", "POST", "/data/raw/series", nil, notInt},
	}
	for _, tc := range cases {
		err := rawCall(bg, c, tc.method, dataPrefix, tc.path, tc.q, tc.body, nil)
		ae := apiErr(t, err)
		// description repeats the HTTP reason; message is present but, per
		// the spec, not to be parsed; there is no code.
		if ae.Status != 400 || !strings.EqualFold(ae.Description, http.StatusText(400)) || ae.Message == "" || ae.Code != 0 || Retryable(err) {
			t.Errorf("%s: got %+v, want 400 {description: Bad Request, status, message}", tc.name, ae)
		}
	}
}

func TestSpec_RemoveDevicesReturnsAnEmptyResultSet(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	g := newGroup(t, e, c, "emptied")
	ds := e.sim.Devices()
	if _, err := c.AssignDevices(bg, g.ID, []DeviceRef{DeviceByID(ds[0].ID)}, false); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal([]DeviceRef{DeviceByID(ds[0].ID)})
	var page map[string]json.RawMessage
	if err := rawCall(bg, c, "POST", platformPrefix, "/device_groups/"+g.ID+"/_/remove_devices/", nil, body, &page); err != nil {
		t.Fatal(err)
	}
	if res := strings.Join(strings.Fields(string(page["results"])), ""); res != "[]" {
		t.Errorf("remove_devices results %s, want an empty result set", page["results"])
	}
}

func TestSpec_DeviceURLIsTheAbsoluteURLOfTheDevice(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	want := e.sim.Devices()[1]
	d, err := c.Device(bg, want.ID)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(d.URL)
	if err != nil || !u.IsAbs() {
		t.Fatalf("device url %q is not absolute (%v)", d.URL, err)
	}
	var again deviceJSON
	if err := c.getJSON(bg, epDevice, u, &again); err != nil || string(again.ID) != want.ID {
		t.Errorf("GET %s gave device %q (%v), want %q", d.URL, again.ID, err, want.ID)
	}
}

func TestSpec_RawSeriesJoinDataframesDefaultsToTrue(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	ids := []string{e.variables("temperature")[0].ID, e.variables("humidity")[0].ID}
	lo, hi := e.window()
	body, _ := json.Marshal(map[string]any{"variables": ids, "columns": []string{"value.value", "timestamp"}, "start": lo, "end": hi})
	var out struct {
		Columns json.RawMessage `json:"columns"`
		Results json.RawMessage `json:"results"`
	}
	if err := rawCall(bg, e.ordinary(), "POST", dataPrefix, "/data/raw/series", nil, body, &out); err != nil {
		t.Fatal(err)
	}
	var flat []string
	if err := json.Unmarshal(out.Columns, &flat); err != nil {
		t.Fatalf("without join_dataframes the columns are %s, want one flat list (the joined mode): %v", out.Columns, err)
	}
	if want := []string{"timestamp", ids[0] + ".value.value", ids[1] + ".value.value"}; !slices.Equal(flat, want) {
		t.Errorf("columns %q, want %q", flat, want)
	}
}

func TestSpec_RawSeriesPrecisionSetsDecimalPlacesAndTzIsAnIANAName(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 20)
	lo, hi := e.window()
	read := func(extra map[string]any) (map[int64]float64, error) {
		req := map[string]any{"variables": []string{v.ID}, "columns": []string{"timestamp", "value.value"}, "join_dataframes": false, "start": lo, "end": hi}
		for k, x := range extra {
			req[k] = x
		}
		body, _ := json.Marshal(req)
		var out struct {
			Columns [][]string `json:"columns"`
			Results [][][]any  `json:"results"`
		}
		if err := rawCall(bg, c, "POST", dataPrefix, "/data/raw/series", nil, body, &out); err != nil {
			return nil, err
		}
		ts, val := slices.Index(out.Columns[0], "timestamp"), slices.Index(out.Columns[0], v.ID+".value.value")
		got := map[int64]float64{}
		for _, row := range out.Results[0] {
			got[int64(row[ts].(float64))] = row[val].(float64)
		}
		return got, nil
	}
	full, err := read(nil)
	if err != nil {
		t.Fatal(err)
	}
	rounded, err := read(map[string]any{"precision": 1, "tz": "Europe/Berlin"})
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, p := range e.pointsIn(v.ID, lo, hi) {
		if full[p.TimestampMs] != p.Value {
			t.Errorf("without precision, point %d is %v, want the full %v", p.TimestampMs, full[p.TimestampMs], p.Value)
		}
		if want := math.Round(p.Value*10) / 10; !simtest.Near(rounded[p.TimestampMs], want) {
			t.Errorf("precision 1: point %d is %v, want %v", p.TimestampMs, rounded[p.TimestampMs], want)
		} else if want != p.Value {
			changed++
		}
	}
	if changed == 0 {
		t.Error("no value of the fixture has more than one decimal place; the precision test cannot fail")
	}
	if _, err := read(map[string]any{"tz": "Mars/Olympus"}); apiErr(t, err).Status != 400 {
		t.Errorf("tz Mars/Olympus: %v, want 400", err)
	}
}

func TestSpec_AWrongOrMissingTokenNeverGives403(t *testing.T) {
	// The organization object answers an ordinary token with 403; a wrong
	// or expired token must still get 401 there.
	e := newConf(t, fleetsim.Options{})
	org := e.sim.Organizations()[0].ID
	_, err := e.client(StaticToken("wrong"), nil).Organization(bg, org)
	if ae := apiErr(t, err); ae.Status != 401 || ae.Code != CodeUnauthorized {
		t.Errorf("wrong token on an organization: %v, want 401 401002", err)
	}
	e.sim.ExpireTokens()
	_, err = e.client(StaticToken(tokOrdinary), nil).Organization(bg, org)
	if ae := apiErr(t, err); ae.Status != 401 {
		t.Errorf("expired ordinary token on an organization: %v, want 401", err)
	}
}
