package fleetapi

// Rules added by the audit of issue 2. Each test names the spec rule it
// checks; the harness is in conformance_test.go.

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"

	"github.com/fleetsync/fleetsync/extract/fleetsim/simtest"
)

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
