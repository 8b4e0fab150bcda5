package fleetapi

// Limits (pagination, the event-log cursor), the transport and versioning.
// Each test names the spec rule it checks; the harness is in
// conformance_test.go.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

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
