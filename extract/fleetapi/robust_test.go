package fleetapi

// These tests pin what the client assumes where the spec says "not shown" or
// lists fields without promising more: another implementation of the spec
// may send what fleetsim never does (absent or null optional fields, other
// JSON types, extra fields, a bare array for a list), so each case here is
// served by a stub rather than fleetsim.

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// stubAPI serves fixed bodies by request path (query ignored unless the key
// carries one) and fails the test on any other path.
func stubAPI(t *testing.T, bodies map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := bodies[r.URL.Path+"?"+r.URL.Query().Get("page")]
		if !ok {
			body, ok = bodies[r.URL.Path]
		}
		if !ok {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDevicesTolerateAbsentNullAndOddlyTypedOptionalFields(t *testing.T) {
	srv := stubAPI(t, map[string]string{
		"/api/v2.0/devices/?": `{"count": true, "next": "?page=2", "previous": null, "results": [
			{"id": "only-id"},
			{"id": "nulls", "url": null, "label": null, "name": null, "description": null,
			 "properties": null, "tags": null, "createdAt": null, "lastActivity": null},
			{"id": 42, "label": "numeric-id", "name": 7, "tags": ["a", 1, null, {"x": 1}],
			 "properties": ["not", "an", "object"], "createdAt": 1700000000000, "lastActivity": "1700000000123",
			 "organization": {"id": "o1"}, "isActive": true, "variablesCount": 3}
		]}`,
		"/api/v2.0/devices/?2": `{"next": 5, "results": [
			{"id": "iso", "createdAt": "2024-05-06 07:08:09", "lastActivity": 1700000000456.0, "tags": "not-a-list"}
		]}`,
	})
	c, _, _ := newTestClient(t, srv.URL, nil)
	var got []Device
	if err := c.Devices(bg, func(d Device) error { got = append(got, d); return nil }); err != nil {
		t.Fatalf("Devices: %v", err)
	}
	want := []Device{
		{ID: "only-id", Properties: []byte("{}")},
		{ID: "nulls", Properties: []byte("{}")},
		{ID: "42", Label: "numeric-id", Name: "7", Tags: []string{"a", "1"}, Properties: []byte("{}"),
			CreatedAt: time.UnixMilli(1700000000000).UTC(), LastActivityMs: 1700000000123},
		{ID: "iso", Properties: []byte("{}"), CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC), LastActivityMs: 1700000000456},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d devices, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Label != w.Label || g.Name != w.Name || string(g.Properties) != string(w.Properties) ||
			!reflect.DeepEqual(g.Tags, w.Tags) && !(len(g.Tags) == 0 && len(w.Tags) == 0) ||
			!g.CreatedAt.Equal(w.CreatedAt) || g.LastActivityMs != w.LastActivityMs {
			t.Errorf("device %d:\n got  %+v\n want %+v", i, g, w)
		}
	}
}

func TestDeviceVariablesMayComeAsABareArrayWithoutTheEnvelope(t *testing.T) {
	// The spec calls GET /devices/{key}/variables/ "the device's variables"
	// without the word paginated; a bare array is one complete page, and
	// the variables get their device from the device asked about.
	srv := stubAPI(t, map[string]string{
		"/api/v2.0/devices/d1/variables/": `[{"id": "v1", "label": "temperature"}, {"id": "v2", "label": "gps", "lastActivity": null}]`,
	})
	c, _, _ := newTestClient(t, srv.URL, nil)
	var got []string
	err := c.Variables(bg, Device{ID: "d1", Label: "truck"}, func(v Variable) error {
		got = append(got, v.ID+"/"+v.Label+"@"+v.DeviceID+"/"+v.DeviceLabel)
		return nil
	})
	if want := []string{"v1/temperature@d1/truck", "v2/gps@d1/truck"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
}

func TestVariableLastValueIsReadUnderAnySpellingAndKeptRawWhenNotADataPoint(t *testing.T) {
	cases := []struct {
		name, body string
		wantPoint  *Point
		wantRaw    string
	}{
		{"lastValue data point", `{"id":"v1","lastValue":{"timestamp":1700000000000,"value":2.5,"context":{}}}`,
			&Point{TsMs: 1700000000000, Value: 2.5, Context: []byte("{}")}, `{"timestamp":1700000000000,"value":2.5,"context":{}}`},
		{"last_value without context", `{"id":"v1","last_value":{"timestamp":1700000000000,"value":3}}`,
			&Point{TsMs: 1700000000000, Value: 3, Context: []byte("{}")}, `{"timestamp":1700000000000,"value":3}`},
		{"a bare number", `{"id":"v1","lastValue":4.5}`, nil, `4.5`},
		{"null", `{"id":"v1","lastValue":null}`, nil, ``},
		{"absent", `{"id":"v1","label":"t","createdAt":"not a date"}`, nil, ``},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := stubAPI(t, map[string]string{"/api/v2.0/variables/v1/": tc.body})
			c, _, _ := newTestClient(t, srv.URL, nil)
			got, err := c.Variable(bg, "v1")
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != "v1" || string(got.LastValueRaw) != tc.wantRaw {
				t.Errorf("id %q raw %s, want v1 and %s", got.ID, got.LastValueRaw, tc.wantRaw)
			}
			if (got.LastValue == nil) != (tc.wantPoint == nil) ||
				got.LastValue != nil && (got.LastValue.TsMs != tc.wantPoint.TsMs || got.LastValue.Value != tc.wantPoint.Value ||
					string(got.LastValue.Context) != string(tc.wantPoint.Context)) {
				t.Errorf("last value %+v, want %+v", got.LastValue, tc.wantPoint)
			}
		})
	}
}

func TestStatisticReadsTheFunctionKeyAsANumberANumericStringOrAnObject(t *testing.T) {
	// Beyond "a key named after the function", the statistics body is not
	// shown: a count may be an integer, a decimal in a string, or an object
	// with a value; other keys beside it are ignored.
	cases := []struct {
		body   string
		want   float64
		wantOK bool
	}{
		{`{"count": 12}`, 12, true},
		{`{"count": 12.0, "start": 1, "end": 2}`, 12, true},
		{`{"count": "12"}`, 12, true},
		{`{"count": {"value": 12, "timestamp": 1700000000000}}`, 12, true},
		{`{"count": null}`, 0, false},
	}
	for _, tc := range cases {
		srv := stubAPI(t, map[string]string{"/api/v1.6/variables/v1/statistics/count/1/2": tc.body})
		c, _, _ := newTestClient(t, srv.URL, nil)
		got, ok, err := c.Statistic(bg, "v1", "count", 1, 2)
		if err != nil || got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: got %v ok=%v err=%v, want %v ok=%v", tc.body, got, ok, err, tc.want, tc.wantOK)
		}
	}
	srv := stubAPI(t, map[string]string{"/api/v1.6/variables/v1/statistics/count/1/2": `{"count": "many"}`})
	c, _, _ := newTestClient(t, srv.URL, nil)
	var de *DecodeError
	if _, _, err := c.Statistic(bg, "v1", "count", 1, 2); !errors.As(err, &de) {
		t.Errorf("a non-numeric count: got %v, want a *DecodeError", err)
	}
}

func TestAggregatePerVariableResultsAcceptTheShapesTheSpecLeavesOpen(t *testing.T) {
	// "Response body of the aggregation POST beyond joined versus
	// per-variable: not shown." Per variable, a result may be an object or a
	// one-row frame, its value under `value` or the function's name.
	srv := stubAPI(t, map[string]string{"/api/v1.6/data/stats/aggregation/": `{"results": [
		{"value": 3, "timestamp": 1700000000000},
		[{"count": "4"}],
		[],
		null,
		{"value": null}
	], "extra": {"ignored": true}}`})
	c, _, _ := newTestClient(t, srv.URL, nil)
	got, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{"a", "b", "c", "d", "e"}, Aggregation: "count"})
	if err != nil {
		t.Fatal(err)
	}
	want := []AggregateValue{
		{VariableID: "a", Value: 3, HasValue: true, TsMs: 1700000000000, HasTs: true},
		{VariableID: "b", Value: 4, HasValue: true},
		{VariableID: "c"}, {VariableID: "d"}, {VariableID: "e"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestAggregateRefusesAResultItCannotReadRatherThanGuessing(t *testing.T) {
	for _, body := range []string{
		`{"results": [{"a": {"count": 3}}]}`,          // keyed by something else
		`{"results": [[{"value": 1}, {"value": 2}]]}`, // a frame of several rows
		`{"results": [{"value": 1}, {"value": 2}]}`,   // more results than variables
		`{"results": {"a": 3}}`,                       // not a list
	} {
		srv := stubAPI(t, map[string]string{"/api/v1.6/data/stats/aggregation/": body})
		c, _, _ := newTestClient(t, srv.URL, nil)
		_, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{"a"}, Aggregation: "count"})
		var de *DecodeError
		if !errors.As(err, &de) || Retryable(err) {
			t.Errorf("%s: got %v, want a permanent *DecodeError", body, err)
		}
	}
}

func TestPaginationLinksThatAreNotStringsEndTheList(t *testing.T) {
	// `next` is a URL or null; an empty string or another JSON type cannot
	// be followed and ends the list instead of failing it.
	for _, next := range []string{`""`, `false`, `0`, `{}`} {
		srv := stubAPI(t, map[string]string{
			"/api/v2.0/devices/": `{"count": 1, "next": ` + next + `, "previous": null, "results": [{"id": "d1"}]}`,
		})
		c, _, _ := newTestClient(t, srv.URL, nil)
		ids, err := collectDevices(c)
		if err != nil || strings.Join(ids, ",") != "d1" {
			t.Errorf("next %s: got %v, %v", next, ids, err)
		}
	}
}

func TestEventLogsAndOrganizationsTolerateOddlyTypedFields(t *testing.T) {
	srv := stubAPI(t, map[string]string{
		"/api/v2.0/events/e1/logs/": `{"next": null, "previous": null, "results": [
			{"id": 9, "createdAt": 1700000000000, "value": 3},
			{"createdAt": "2024-01-02T03:04:05.678Z"}
		]}`,
		"/api/v2.0/organizations/o1/": `{"id": "o1", "label": null, "createdAt": "2024-01-02T03:04:05+01:00", "plan": "x"}`,
	})
	c, _, _ := newTestClient(t, srv.URL, nil)
	var logs []EventLog
	if err := c.EventLogs(bg, "e1", -1, func(l EventLog) error { logs = append(logs, l); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(logs) != 2 || logs[0].ID != "9" || !logs[0].CreatedAt.Equal(time.UnixMilli(1700000000000)) ||
		logs[1].ID != "" || !logs[1].CreatedAt.Equal(time.Date(2024, 1, 2, 3, 4, 5, 678e6, time.UTC)) {
		t.Errorf("logs %+v", logs)
	}
	o, err := c.Organization(bg, "o1")
	if err != nil || o.ID != "o1" || o.Label != "" || !o.CreatedAt.Equal(time.Date(2024, 1, 2, 2, 4, 5, 0, time.UTC)) {
		t.Errorf("organization %+v, %v", o, err)
	}
}

func TestPaginationResolvesARelativeNextAgainstThePageItCameFrom(t *testing.T) {
	// "?page=2" on /api/v2.0/devices/ means /api/v2.0/devices/?page=2, not
	// the base URL with a query (RFC 3986 resolution).
	srv := stubAPI(t, map[string]string{
		"/api/v2.0/devices/?":  `{"count": 3, "next": "?page=2", "previous": null, "results": [{"id": "d1"}]}`,
		"/api/v2.0/devices/?2": `{"count": 3, "next": "./?page=3", "previous": "?", "results": [{"id": "d2"}]}`,
		"/api/v2.0/devices/?3": `{"count": 3, "next": null, "previous": "?page=2", "results": [{"id": "d3"}]}`,
	})
	c, _, _ := newTestClient(t, srv.URL, nil)
	ids, err := collectDevices(c)
	if err != nil || strings.Join(ids, ",") != "d1,d2,d3" {
		t.Errorf("got %v, %v; want d1,d2,d3", ids, err)
	}
}

func TestAggregateJoinedFrameIsReadByColumnNameAndRefusedWhenAmbiguous(t *testing.T) {
	// The columns name the variables, so their order in the frame does not
	// matter: b comes first here although the request asks for a first.
	srv := stubAPI(t, map[string]string{"/api/v1.6/data/stats/aggregation/": `{"columns": ["timestamp", "b.value", "a.value"], "results": [[1700000000000, 7, 3]]}`})
	c, _, _ := newTestClient(t, srv.URL, nil)
	got, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{"a", "b"}, Aggregation: "count", Joined: true})
	if err != nil || len(got) != 2 || got[0].Value != 3 || got[1].Value != 7 || !got[0].HasValue || !got[1].HasValue {
		t.Fatalf("joined aggregates %+v, %v; want a=3 and b=7", got, err)
	}
	for _, body := range []string{
		`{"columns": ["timestamp", "a.value", "a.count"], "results": [[1700000000000, 3, 3]]}`,       // two columns for a
		`{"columns": ["timestamp", "a.value"], "results": [[1700000000000, 3], [1700000000001, 4]]}`, // two values for a
		`{"columns": ["a.value"], "results": [[3]]}`,                                                 // no timestamp column
	} {
		srv := stubAPI(t, map[string]string{"/api/v1.6/data/stats/aggregation/": body})
		c, _, _ := newTestClient(t, srv.URL, nil)
		_, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{"a"}, Aggregation: "count", Joined: true})
		var de *DecodeError
		if !errors.As(err, &de) || Retryable(err) {
			t.Errorf("%s: got %v, want a permanent *DecodeError", body, err)
		}
	}
}
