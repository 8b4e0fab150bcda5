package fleetsim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim/simtest"
)

// oldVar returns a variable that has points older than the retention window.
func (e *env) oldVar() string {
	floor := e.sim.RetentionFloor().UnixMilli()
	for _, id := range e.variableIDs() {
		if pts := e.sim.Points(id); len(pts) > 0 && pts[0].TimestampMs < floor {
			return id
		}
	}
	e.t.Fatal("no variable with points older than retention")
	return ""
}

func TestValuesJSONReturnsTheLast100ByDefault(t *testing.T) {
	e := newEnv(t, Options{})
	id := e.oldVar()
	want := e.retained(id)
	r := e.get("/api/v1.6/variables/" + id + "/values")
	expect(t, "values", r, 200, nil)
	var body struct {
		Count    int     `json:"count"`
		Next     *string `json:"next"`
		Previous *string `json:"previous"`
		Results  []struct {
			Timestamp int64          `json:"timestamp"`
			Value     float64        `json:"value"`
			Context   map[string]any `json:"context"`
			CreatedAt int64          `json:"created_at"`
		} `json:"results"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Count != len(want) || len(body.Results) != 100 || body.Next == nil || body.Previous != nil {
		t.Fatalf("count %d (want %d retained), %d results, next %v", body.Count, len(want), len(body.Results), body.Next)
	}
	for i, p := range body.Results {
		if p.Timestamp != want[i].TimestampMs || p.Value != want[i].Value || p.Context == nil || p.CreatedAt < p.Timestamp {
			t.Fatalf("result %d = %+v, want the %d-th newest point %+v", i, p, i, want[i])
		}
	}
	// Following next walks back through every retained point.
	seen := len(body.Results)
	next := *body.Next
	for next != "" {
		u, _ := url.Parse(next)
		r := e.get(u.RequestURI())
		m := r.json(t)
		seen += len(m["results"].([]any))
		next, _ = m["next"].(string)
	}
	if seen != len(want) {
		t.Fatalf("paging saw %d points, want %d", seen, len(want))
	}
	expect(t, "page past the end", e.get("/api/v1.6/variables/"+id+"/values?page=99"), 404, map[string]any{"detail": "Invalid page."})
	expect(t, "trailing slash", e.get("/api/v1.6/variables/"+id+"/values/?page_size=3"), 200, nil)
	expect(t, "start after end", e.get("/api/v1.6/variables/"+id+"/values?start=5&end=4"), 400, nil)
	m := e.get("/api/v1.6/variables/" + id + "/values?start=abc").json(t)
	if m["description"] != "Bad Request" || m["status"] != float64(400) || m["message"] == nil {
		t.Fatalf("schema error shape: %v", m)
	}
}

func TestValuesCountCanBeABoolean(t *testing.T) {
	e := newEnv(t, Options{CountAsBool: true})
	r := e.get("/api/v1.6/variables/" + e.variableIDs()[0] + "/values?page_size=2")
	if c, ok := r.json(t)["count"].(bool); !ok || !c {
		t.Fatalf("count with CountAsBool: %s", r.body)
	}
}

func TestValuesCSV(t *testing.T) {
	e := newEnv(t, Options{})
	// The position variable: its context needs quoting.
	d := e.sim.Devices()[0]
	v := d.Variables[3]
	if v.Kind != "position" {
		t.Fatalf("fixture: variable 3 is %s", v.Kind)
	}
	want := e.retained(v.ID)
	get := func(q string) ([][]string, response) {
		t.Helper()
		r := e.do("GET", "/api/v1.6/variables/"+v.ID+"/values?format=csv&token="+testToken+q, nil, "-")
		if r.status != 200 {
			return nil, r
		}
		rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
		if err != nil {
			t.Fatalf("CSV does not parse: %v\n%s", err, r.body)
		}
		return rows, r
	}
	rows, r := get("")
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
		t.Fatalf("content type %q", ct)
	}
	if cd := r.header.Get("Content-Disposition"); cd != "attachment; filename=values_"+v.ID+".csv" {
		t.Fatalf("content disposition %q", cd)
	}
	if strings.Join(rows[0], "|") != "Timestamp|Human readable date (UTC)|"+v.Label+"|Context" {
		t.Fatalf("header %q", rows[0])
	}
	if len(rows)-1 != len(want) {
		t.Fatalf("CSV without page_size or range: %d rows, want every retained point (%d)", len(rows)-1, len(want))
	}
	for i, row := range rows[1:] {
		ts, _ := strconv.ParseInt(row[0], 10, 64)
		val, _ := strconv.ParseFloat(row[2], 64)
		if ts != want[i].TimestampMs || val != want[i].Value {
			t.Fatalf("row %d = %q, want %+v", i, row, want[i])
		}
		if date := time.UnixMilli(ts).UTC().Format("2006-01-02 15:04:05"); !strings.HasPrefix(row[1], date) {
			t.Fatalf("row %d date %q, want UTC %s", i, row[1], date)
		}
		if !strings.HasPrefix(row[3], "b'") || !strings.HasSuffix(row[3], "'") {
			t.Fatalf("row %d context %q is not a bytes literal", i, row[3])
		}
		var ctx map[string]any
		if err := json.Unmarshal([]byte(row[3][2:len(row[3])-1]), &ctx); err != nil || ctx["lat"] != want[i].Context["lat"] {
			t.Fatalf("row %d context %q: %v", i, row[3], err)
		}
	}
	p1, _ := get("&page_size=5&page=1")
	p7, _ := get("&page_size=5&page=7")
	if len(p1) != 6 || strings.Join(p1[1], ",") != strings.Join(p7[1], ",") {
		t.Fatalf("page is ignored in CSV: page 1 %q vs page 7 %q", p1[1], p7[1])
	}
	ranged, _ := get(fmt.Sprintf("&start=%d&end=%d", want[9].TimestampMs, want[0].TimestampMs))
	if len(ranged) != 11 {
		t.Fatalf("CSV over a range of 10 points: %d rows", len(ranged)-1)
	}
	_, r = get("&start=1000")
	if r.status != 403 || len(r.body) != 0 {
		t.Fatalf("retention violation in CSV: %d with %d body bytes, want 403 and an empty body", r.status, len(r.body))
	}
}

func TestPyBytesLiteralAndPythonJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{}`, `b'{}'`},
		{`{"a":1,"b":[1,2]}`, `b'{"a": 1, "b": [1, 2]}'`},
		{`{"s":"x,y: z"}`, `b'{"s": "x,y: z"}'`},
		{`{"s":"it's"}`, `b'{"s": "it\'s"}'`},
		{`{"s":"ü"}`, `b'{"s": "\\u00fc"}'`},
		{`{"s":"a\"b"}`, `b'{"s": "a\\"b"}'`},
	}
	for _, c := range cases {
		if got := string(appendPyBytesLiteral(nil, pythonJSON([]byte(c.in)))); got != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
}

// oracleAgg computes an aggregate the slow way from the oracle's points.
func oracleAgg(pts []SimPoint, fn string) (float64, bool) {
	if len(pts) == 0 {
		return 0, fn == "count" || fn == "sum"
	}
	var sum float64
	mn, mx := math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		sum += p.Value
		mn, mx = math.Min(mn, p.Value), math.Max(mx, p.Value)
	}
	mean := sum / float64(len(pts))
	switch fn {
	case "mean", "average":
		return mean, true
	case "min":
		return mn, true
	case "max":
		return mx, true
	case "sum":
		return sum, true
	case "count":
		return float64(len(pts)), true
	case "first":
		return pts[len(pts)-1].Value, true // pts are newest first
	case "last", "raw":
		return pts[0].Value, true
	case "std":
		var ss float64
		for _, p := range pts {
			ss += (p.Value - mean) * (p.Value - mean)
		}
		return math.Sqrt(ss / float64(len(pts))), true
	}
	return 0, false
}

func TestStatisticsFunctions(t *testing.T) {
	e := newEnv(t, Options{})
	id := e.variableIDs()[0]
	pts := e.retained(id)
	start, end := pts[40].TimestampMs, pts[10].TimestampMs
	sel := pts[10:41]
	for _, fn := range []string{"mean", "min", "max", "sum", "count", "first", "last", "std"} {
		r := e.get(fmt.Sprintf("/api/v1.6/variables/%s/statistics/%s/%d/%d", id, fn, start, end))
		expect(t, fn, r, 200, nil)
		m := r.json(t)
		want, _ := oracleAgg(sel, fn)
		if got, ok := m[fn].(float64); !ok || len(m) != 1 || !simtest.Near(got, want) {
			t.Errorf("statistics %s = %s, want {%q: %v}", fn, r.body, fn, want)
		}
	}
	for _, fn := range []string{"variance", "stddev", "meen", "average"} {
		expect(t, fn, e.get(fmt.Sprintf("/api/v1.6/variables/%s/statistics/%s/%d/%d", id, fn, start, end)), 200, map[string]any{})
	}
	expect(t, "count of an empty range", e.get(fmt.Sprintf("/api/v1.6/variables/%s/statistics/count/%d/%d/", id, end+1, end+1)), 200, map[string]any{"count": 0})
	expect(t, "mean of an empty range", e.get(fmt.Sprintf("/api/v1.6/variables/%s/statistics/mean/%d/%d", id, end+1, end+1)), 200, map[string]any{"mean": nil})
	expect(t, "non-integer bound", e.get(fmt.Sprintf("/api/v1.6/variables/%s/statistics/mean/x/%d", id, end)), 400, nil)
	expect(t, "unknown variable", e.get(fmt.Sprintf("/api/v1.6/variables/nope/statistics/mean/%d/%d", start, end)), 404, nil)
}

func TestAggregation(t *testing.T) {
	e := newEnv(t, Options{})
	ids := e.variableIDs()[:3]
	pts := e.retained(ids[0])
	start, end := pts[60].TimestampMs, pts[0].TimestampMs
	post := func(body map[string]any) response {
		return e.post("/api/v1.6/data/stats/aggregation/", body)
	}
	for _, fn := range []string{"mean", "min", "max", "sum", "count", "first", "last", "average", "raw"} {
		r := post(map[string]any{"variables": ids[:1], "aggregation": fn, "start": start, "end": end, "join_dataframes": false})
		expect(t, fn, r, 200, nil)
		want, _ := oracleAgg(pts[:61], fn)
		res := r.json(t)["results"].([]any)[0].(map[string]any)
		if !simtest.Near(res["value"].(float64), want) {
			t.Errorf("aggregation %s = %v, want %v", fn, res["value"], want)
		}
	}
	mean := post(map[string]any{"variables": ids[:1], "aggregation": "mean", "start": start, "end": end, "join_dataframes": false})
	avg := post(map[string]any{"variables": ids[:1], "aggregation": "average", "start": start, "end": end, "join_dataframes": false})
	if string(mean.body) != string(avg.body) {
		t.Errorf("average differs from mean: %s vs %s", avg.body, mean.body)
	}
	for _, bad := range []string{"variance", "stddev", "std", "AVG", ""} {
		r := post(map[string]any{"variables": ids[:1], "aggregation": bad})
		expect(t, "aggregation "+bad, r, 400, nil)
		m := r.json(t)
		if m["description"] != "Bad Request" || m["status"] != float64(400) || !strings.Contains(m["message"].(string), "average") {
			t.Errorf("aggregation %q: body %s", bad, r.body)
		}
	}
	r := post(map[string]any{"variables": ids[:1], "aggregation": "count", "start": start, "limit": 5})
	expect(t, "limit truncates the input", r, 200, map[string]any{"columns": []string{"timestamp", ids[0] + ".value"}, "results": [][]any{{pts[0].TimestampMs, 5}}})
	r = post(map[string]any{"variables": ids[:1], "aggregation": "count"})
	if res := r.json(t)["results"].([]any)[0].([]any); res[1] != float64(100) {
		t.Errorf("count without bounds: %v, want the implicit cap of 100", res)
	}
	r = post(map[string]any{"variables": ids[:1], "aggregation": "mean", "start": start, "end": end, "precision": 1, "join_dataframes": false})
	v := r.json(t)["results"].([]any)[0].(map[string]any)["value"].(float64)
	if v != math.Round(v*10)/10 {
		t.Errorf("precision 1 gave %v", v)
	}
	joined := post(map[string]any{"variables": ids, "aggregation": "last", "start": start})
	split := post(map[string]any{"variables": ids, "aggregation": "last", "start": start, "join_dataframes": false})
	jm, sm := joined.json(t), split.json(t)
	if len(sm["results"].([]any)) != 3 {
		t.Errorf("per-variable aggregation: %s", split.body)
	}
	if cols := jm["columns"].([]any); len(cols) != 4 || cols[0] != "timestamp" {
		t.Errorf("joined aggregation columns: %v", cols)
	}
	expect(t, "bad tz", post(map[string]any{"variables": ids[:1], "aggregation": "mean", "tz": "Mars/Olympus"}), 400, nil)
	expect(t, "good tz", post(map[string]any{"variables": ids[:1], "aggregation": "mean", "tz": "America/Bogota"}), 200, nil)
	expect(t, "negative limit", post(map[string]any{"variables": ids[:1], "aggregation": "mean", "limit": -1}), 400, nil)
	expect(t, "unknown variable", post(map[string]any{"variables": []string{"nope"}, "aggregation": "mean"}), 404, map[string]any{"code": 404001, "message": "The request was not found."})
}

// rawSeries posts a raw-series request and decodes the response.
func (e *env) rawSeries(body map[string]any) (response, []any, []any) {
	e.t.Helper()
	r := e.post("/api/v1.6/data/raw/series", body)
	if r.status != 200 {
		return r, nil, nil
	}
	m := r.json(e.t)
	if k := keys(e.t, r.body); strings.Join(k, ",") != "columns,results" {
		e.t.Fatalf("raw series keys %v", k)
	}
	return r, m["columns"].([]any), m["results"].([]any)
}

func TestRawSeriesFramesPerVariable(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.sim.Devices()[0]
	ids := []string{d.Variables[3].ID, d.Variables[0].ID}
	all := []string{"value.value", "timestamp", "variable.id", "variable.label", "variable.name", "variable.properties", "value.context", "device.id", "device.name", "device.label"}
	pts0 := e.retained(ids[0])
	start := pts0[19].TimestampMs
	_, cols, res := e.rawSeries(map[string]any{"variables": ids, "columns": all, "join_dataframes": false, "start": start})
	if len(cols) != 2 || len(res) != 2 {
		t.Fatalf("want one column list and one frame per variable, got %d and %d", len(cols), len(res))
	}
	for i, id := range ids {
		c := cols[i].([]any)
		for j, name := range all {
			want := id + "." + name
			if name == "timestamp" {
				want = "timestamp"
			}
			if c[j] != want {
				t.Fatalf("frame %d column %d = %v, want %s", i, j, c[j], want)
			}
		}
		pts := e.retained(id)
		var n int
		for _, p := range pts {
			if p.TimestampMs >= start {
				n++
			}
		}
		frame := res[i].([]any)
		if len(frame) != n {
			t.Fatalf("frame %d: %d rows, want %d (start only: no implicit cap)", i, len(frame), n)
		}
		row := frame[0].([]any)
		v := d.Variables[3]
		if i == 1 {
			v = d.Variables[0]
		}
		if row[0] != pts[0].Value || row[1] != float64(pts[0].TimestampMs) || row[2] != v.ID || row[3] != v.Label || row[4] != v.Name ||
			!jsonEqual(row[5], v.Properties) || row[7] != d.ID || row[8] != d.Name || row[9] != d.Label {
			t.Fatalf("frame %d first row %v", i, row)
		}
		if _, ok := row[6].(map[string]any); !ok {
			t.Fatalf("value.context is not an object: %v", row[6])
		}
	}
}

func TestRawSeriesJoinedOuterJoinsOnTimestamp(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.sim.Devices()[0]
	ids := []string{d.Variables[0].ID, d.Variables[1].ID} // different sampling instants
	a, b := e.retained(ids[0]), e.retained(ids[1])
	start := min(a[29].TimestampMs, b[29].TimestampMs)
	_, cols, res := e.rawSeries(map[string]any{"variables": ids, "columns": []string{"value.value", "value.context", "timestamp"}, "start": start})
	wantCols := []any{"timestamp", ids[0] + ".value.value", ids[0] + ".value.context", ids[1] + ".value.value", ids[1] + ".value.context"}
	if !jsonEqual(cols, wantCols) {
		t.Fatalf("joined columns %v, want %v", cols, wantCols)
	}
	byTs := map[int64][2]*SimPoint{}
	for k, pts := range [][]SimPoint{a, b} {
		for i := range pts {
			if pts[i].TimestampMs >= start {
				e := byTs[pts[i].TimestampMs]
				e[k] = &pts[i]
				byTs[pts[i].TimestampMs] = e
			}
		}
	}
	if len(res) != len(byTs) {
		t.Fatalf("joined rows %d, want one per distinct timestamp %d", len(res), len(byTs))
	}
	nulls := 0
	prev := int64(math.MaxInt64)
	for _, x := range res {
		row := x.([]any)
		ts := int64(row[0].(float64))
		if ts >= prev {
			t.Fatalf("rows not newest first at %d", ts)
		}
		prev = ts
		want := byTs[ts]
		for k := 0; k < 2; k++ {
			if want[k] == nil {
				if row[1+2*k] != nil || row[2+2*k] != nil {
					t.Fatalf("row %d: variable %d has no sample but cells %v", ts, k, row)
				}
				nulls++
			} else if row[1+2*k] != want[k].Value {
				t.Fatalf("row %d: cell %v, want %v", ts, row[1+2*k], want[k].Value)
			}
		}
	}
	if nulls == 0 {
		t.Fatalf("fixture: expected some null cells between differently sampled variables")
	}
}

func TestRawSeriesLimitsAndTimeRanges(t *testing.T) {
	e := newEnv(t, Options{})
	id := e.oldVar()
	pts := e.retained(id)
	n := len(pts)
	mid := pts[n/2].TimestampMs
	rows := func(body map[string]any) int {
		t.Helper()
		body["variables"] = []string{id}
		body["join_dataframes"] = false
		r, _, res := e.rawSeries(body)
		if r.status != 200 {
			t.Fatalf("%v: %d %s", body, r.status, r.body)
		}
		return len(res[0].([]any))
	}
	cases := []struct {
		name string
		body map[string]any
		want int
	}{
		{"neither bound: the last 100", map[string]any{}, 100},
		{"neither bound, limit 0: every retained point", map[string]any{"limit": 0}, n},
		{"neither bound, limit 7", map[string]any{"limit": 7}, 7},
		{"start only: no implicit cap", map[string]any{"start": pts[n-1].TimestampMs}, n},
		{"end only: from the earliest retained point", map[string]any{"end": mid}, n - n/2},
		{"both bounds inclusive", map[string]any{"start": pts[20].TimestampMs, "end": pts[10].TimestampMs}, 11},
		{"start only with limit", map[string]any{"start": pts[n-1].TimestampMs, "limit": 150}, 150},
	}
	for _, c := range cases {
		if got := rows(c.body); got != c.want {
			t.Errorf("%s: %d rows, want %d", c.name, got, c.want)
		}
	}
	ids := e.variableIDs()[:2]
	_, _, res := e.rawSeries(map[string]any{"variables": ids, "limit": 3, "join_dataframes": false})
	if len(res[0].([]any)) != 3 || len(res[1].([]any)) != 3 {
		t.Errorf("limit is per variable: frames of %d and %d rows", len(res[0].([]any)), len(res[1].([]any)))
	}
	_, _, res = e.rawSeries(map[string]any{"variables": []string{id}, "limit": 2, "precision": 0, "join_dataframes": false})
	if v := res[0].([]any)[0].([]any)[0].(float64); v != math.Round(v) {
		t.Errorf("precision 0 gave %v", v)
	}
}

func TestDataAPIValidationErrors(t *testing.T) {
	e := newEnv(t, Options{})
	id := e.variableIDs()[0]
	schemaShape := func(t *testing.T, r response) {
		t.Helper()
		if k := keys(t, r.body); strings.Join(k, ",") != "description,status,message" {
			t.Fatalf("schema error keys %v: %s", k, r.body)
		}
	}
	cases := []struct {
		name string
		body any
	}{
		{"variable.properties.color column", map[string]any{"variables": []string{id}, "columns": []string{"variable.properties.color"}}},
		{"unknown column", map[string]any{"variables": []string{id}, "columns": []string{"value"}}},
		{"limit -1", map[string]any{"variables": []string{id}, "limit": -1}},
		{"start as a string", map[string]any{"variables": []string{id}, "start": "yesterday"}},
		{"end as a float", map[string]any{"variables": []string{id}, "end": 1.5}},
		{"start after end", map[string]any{"variables": []string{id}, "start": 2_000_000_000_000, "end": 1_900_000_000_000}},
		{"join_dataframes not a boolean", map[string]any{"variables": []string{id}, "join_dataframes": "yes"}},
		{"no variables", map[string]any{"columns": []string{"timestamp"}}},
		{"body is an array", []string{id}},
		{"unknown tz", map[string]any{"variables": []string{id}, "tz": "Nowhere/Land"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.post("/api/v1.6/data/raw/series", c.body)
			expect(t, c.name, r, 400, nil)
			schemaShape(t, r)
		})
	}
	r := e.post("/api/v1.6/data/raw/series", `{"variables": [`)
	expect(t, "malformed JSON", r, 400, nil)
	if m := r.json(t); len(m) != 1 || !strings.HasPrefix(m["detail"].(string), "JSON parse error - ") {
		t.Fatalf("malformed JSON body: %s", r.body)
	}
	r = e.post("/api/v1.6/data/raw/series", map[string]any{"variables": []string{"nope"}})
	expect(t, "unknown variable", r, 404, map[string]any{"code": 404001, "message": "The request was not found."})
}

func TestRetentionRejectsTheWholeRange(t *testing.T) {
	e := newEnv(t, Options{})
	id := e.oldVar()
	floor := e.sim.RetentionFloor().UnixMilli()
	now := e.clock.Now().UnixMilli()
	in := now - 3600_000
	past := floor - 1000
	seconds := now / 1000 // a seconds-precision timestamp reads as 1970
	retention := func(t *testing.T, r response) {
		t.Helper()
		if r.status != 403 {
			t.Fatalf("status %d, want 403: %s", r.status, r.body)
		}
		m := r.json(t)
		if m["code"] != float64(403003) || !strings.Contains(m["message"].(string), "24 months") || len(m) != 2 {
			t.Fatalf("retention body %s", r.body)
		}
	}
	ranges := []struct {
		name       string
		start, end *int64
	}{
		{"start past the window", &past, nil},
		{"end past the window", nil, &past},
		{"both past the window", &past, &past},
		{"start past, end inside", &past, &in},
		{"seconds-precision start", &seconds, nil},
	}
	for _, rg := range ranges {
		t.Run(rg.name, func(t *testing.T) {
			body := map[string]any{"variables": []string{id}}
			q := url.Values{}
			if rg.start != nil {
				body["start"] = *rg.start
				q.Set("start", strconv.FormatInt(*rg.start, 10))
			}
			if rg.end != nil {
				body["end"] = *rg.end
				q.Set("end", strconv.FormatInt(*rg.end, 10))
			}
			retention(t, e.post("/api/v1.6/data/raw/series", body))
			body["aggregation"] = "count"
			retention(t, e.post("/api/v1.6/data/stats/aggregation/", body))
			retention(t, e.get("/api/v1.6/variables/"+id+"/values?"+q.Encode()))
			s, en := in-1000, in
			if rg.start != nil {
				s = *rg.start
			}
			if rg.end != nil {
				en = *rg.end
			}
			if s <= en {
				retention(t, e.get(fmt.Sprintf("/api/v1.6/variables/%s/statistics/count/%d/%d", id, s, en)))
			}
		})
	}
	// Without bounds, retention only filters.
	_, _, res := e.rawSeries(map[string]any{"variables": []string{id}, "limit": 0, "join_dataframes": false})
	if got, want := len(res[0].([]any)), len(e.retained(id)); got != want || want == len(e.sim.Points(id)) {
		t.Fatalf("no bounds: %d rows, want the %d retained of %d", got, want, len(e.sim.Points(id)))
	}
}

func TestFaultsAreInjectedIntoAPIResponsesOnly(t *testing.T) {
	e := newEnv(t, Options{})
	id := e.variableIDs()[0]
	e.sim.SetFaults(Faults{ErrorRate: 1, Seed: 3})
	seen := map[int]bool{}
	for i := 0; i < 20; i++ {
		r := e.get("/api/v2.0/devices/")
		seen[r.status] = true
	}
	if !seen[500] || !seen[503] || len(seen) != 2 {
		t.Fatalf("error rate 1 gave statuses %v, want 500 and 503 only", seen)
	}
	expect(t, "control during faults", e.do("GET", "/_sim/counters", nil, "-"), 200, nil)

	e.sim.SetFaults(Faults{RateLimitRate: 1, RetryAfter: "Wed, 21 Oct 2026 07:28:00 GMT"})
	r := e.get("/api/v2.0/devices/")
	if r.status != 429 || r.header.Get("Retry-After") != "Wed, 21 Oct 2026 07:28:00 GMT" {
		t.Fatalf("429 fault: %d %q", r.status, r.header.Get("Retry-After"))
	}

	e.sim.SetFaults(Faults{Latency: 50 * time.Millisecond})
	t0 := time.Now()
	e.get("/api/v2.0/devices/")
	if d := time.Since(t0); d < 50*time.Millisecond {
		t.Fatalf("latency fault: answered in %v", d)
	}

	e.sim.SetFaults(Faults{SlowHeaders: 50 * time.Millisecond, SlowRate: 1})
	t0 = time.Now()
	e.get("/api/v2.0/devices/")
	if d := time.Since(t0); d < 50*time.Millisecond {
		t.Fatalf("slow-headers fault: answered in %v", d)
	}

	e.sim.SetFaults(Faults{CutRate: 1, Seed: 9})
	for i := 0; i < 5; i++ {
		body := fmt.Sprintf(`{"variables":["%s"],"limit":0,"columns":["value.value","timestamp","value.context"]}`, id)
		req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1.6/data/raw/series", strings.NewReader(body))
		req.Header.Set("X-Auth-Token", testToken)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			continue // cut before the headers arrived: also a failure the client sees
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("cut fault: body of %d bytes read without error", len(b))
		}
	}
	e.sim.SetFaults(Faults{})
	if c := e.sim.Counters()["cut POST /api/v1.6/data/raw/series"]; c != 5 {
		t.Fatalf("cut counter %d, want 5", c)
	}
	expect(t, "after faults are off", e.get("/api/v2.0/devices/"), 200, nil)
}

func TestCountersCountRequestsByEndpointAndStatus(t *testing.T) {
	e := newEnv(t, Options{})
	id := e.variableIDs()[0]
	e.post("/api/v1.6/data/raw/series", map[string]any{"variables": []string{id}})
	e.post("/api/v1.6/data/raw/series", map[string]any{"variables": []string{id}})
	e.get("/api/v1.6/data/raw/series")
	e.get("/api/v2.0/devices/~nope/")
	e.do("GET", "/api/v2.0/devices/", nil, "bad")
	want := map[string]int{
		"POST /api/v1.6/data/raw/series 200":      2,
		"GET /api/v1.6/data/raw/series 405":       1,
		"GET /api/v2.0/devices/{device_key}/ 404": 1,
		"GET /api/v2.0/devices/ 401":              1,
	}
	if got := e.sim.Counters(); !jsonEqual(got, want) {
		t.Fatalf("counters %v, want %v", got, want)
	}
	e.sim.ResetCounters()
	if got := e.sim.Counters(); len(got) != 0 {
		t.Fatalf("after reset: %v", got)
	}
}

func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	vals := []float64{0, 1, -1, 0.1, 0.29, 21.37, -3.05, 100, 1e-7, 123456.789, 1e21, 5e-324, 999999999999.99, -0.01, 0.5, 1234.5, math.MaxFloat64}
	rnd := uint64(1)
	for i := 0; i < 200000; i++ {
		rnd = splitmix64(rnd)
		v := float64(int64(rnd%2000000)-1000000) / []float64{1, 10, 100, 1000, 3}[i%5]
		vals = append(vals, v, round(v, 2), round(v/7, 6), round(v*1000, 6), math.Float64frombits(rnd)/1e300)
	}
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		want, _ := json.Marshal(v)
		if got := appendFloat(nil, v); string(got) != string(want) {
			t.Fatalf("appendFloat(%v) = %s, encoding/json gives %s", v, got, want)
		}
	}
	if got := string(appendFloat(nil, math.Copysign(0, -1))); got != "-0" && got != "0" {
		t.Fatalf("negative zero: %s", got)
	}
}

func TestNonFiniteValuesRenderAsPythonTokens(t *testing.T) {
	e := newEnv(t, Options{})
	d, v, _, last := e.firstVariable()
	newest := last.TimestampMs
	tsNaN, tsInf, tsNegInf := newest+1000, newest+2000, newest+3000
	if err := e.sim.AddPoints(v.ID, []SimPoint{{TimestampMs: tsNaN, Value: math.NaN()}, {TimestampMs: tsInf, Value: math.Inf(1)}, {TimestampMs: tsNegInf, Value: math.Inf(-1)}}); err != nil {
		t.Fatal(err)
	}
	// has fails unless body holds every fragment.
	has := func(what string, r response, fragments ...string) {
		t.Helper()
		if r.status != 200 {
			t.Fatalf("%s: status %d: %s", what, r.status, r.body)
		}
		for _, f := range fragments {
			if !strings.Contains(string(r.body), f) {
				t.Errorf("%s: body lacks %s:\n%.600s", what, f, r.body)
			}
		}
	}
	ts := func(ms int64) string { return strconv.FormatInt(ms, 10) }
	has("GET values", e.get("/api/v1.6/variables/"+v.ID+"/values?page_size=5"),
		`{"timestamp":`+ts(tsNaN)+`,"value":NaN,`, `{"timestamp":`+ts(tsInf)+`,"value":Infinity,`, `{"timestamp":`+ts(tsNegInf)+`,"value":-Infinity,`)
	has("raw series frames", e.post("/api/v1.6/data/raw/series", map[string]any{"variables": []string{v.ID}, "join_dataframes": false, "limit": 3}),
		`[NaN,`+ts(tsNaN)+`]`, `[Infinity,`+ts(tsInf)+`]`, `[-Infinity,`+ts(tsNegInf)+`]`)
	has("raw series joined", e.post("/api/v1.6/data/raw/series", map[string]any{"variables": []string{v.ID, d.Variables[1].ID}, "limit": 3}),
		`[`+ts(tsNaN)+`,NaN,null]`, `[`+ts(tsInf)+`,Infinity,null]`, `[`+ts(tsNegInf)+`,-Infinity,null]`)
	lastValue := `"lastValue":{"timestamp":` + ts(tsNegInf) + `,"value":-Infinity,`
	has("GET variable", e.get("/api/v2.0/variables/"+v.ID+"/"), lastValue)
	has("device's variable list", e.get("/api/v2.0/devices/"+d.ID+"/variables/"), lastValue)
	has("variable list", e.get("/api/v2.0/variables/"), lastValue)
	has("variable by label", e.get("/api/v2.0/devices/"+d.ID+"/variables/~"+v.Label+"/"), lastValue)
	has("statistics", e.get(fmt.Sprintf("/api/v1.6/variables/%s/statistics/max/%d/%d", v.ID, tsInf, tsNegInf)), `{"max":Infinity}`)
	has("aggregation raw", e.post("/api/v1.6/data/stats/aggregation/", map[string]any{"variables": []string{v.ID}, "aggregation": "raw", "join_dataframes": false}),
		`"value":-Infinity`)
	has("control points", e.do("GET", "/_sim/variables/"+v.ID+"/points", nil, "-"),
		`{"timestamp":`+ts(tsNaN)+`,"value":NaN,`, `"value":Infinity,`, `"value":-Infinity,`)
	has("CSV", e.get("/api/v1.6/variables/"+v.ID+"/values?format=csv&page_size=3"),
		ts(tsNaN)+`,`, `,nan,`, `,inf,`, `,-inf,`)

	// Python's json output is accepted back by the control interface.
	r := e.do("POST", "/_sim/variables/"+d.Variables[1].ID+"/points", `[{"timestamp":`+ts(newest+5)+`,"value":NaN},{"timestamp":`+ts(newest+6)+`,"value":-Infinity,"context":{"note":"NaN in a string"}}]`, "-")
	expect(t, "POST points with bare NaN", r, 200, map[string]any{"added": 2})
	got := e.sim.Points(d.Variables[1].ID)
	if a, b := got[len(got)-2], got[len(got)-1]; !math.IsNaN(a.Value) || !math.IsInf(b.Value, -1) || b.Context["note"] != "NaN in a string" {
		t.Errorf("points posted with bare tokens came back as %+v, %+v", a, b)
	}
	// Finite values are untouched: no placeholder leaks anywhere.
	r = e.get("/api/v2.0/variables/" + d.Variables[2].ID + "/")
	if strings.Contains(string(r.body), "non-finite") || strings.Contains(string(r.body), "NaN") {
		t.Errorf("a finite variable renders %s", r.body)
	}
}

func TestUndecodableVariablesSpoilOnlyTheirOwnCells(t *testing.T) {
	e := newEnv(t, Options{})
	ids := e.variableIDs()
	bad, good := ids[0], ids[2] // same sampling instants: joined rows hold both
	cols := []string{"value.value", "timestamp", "value.context", "variable.id"}
	frames := func() []any {
		t.Helper()
		r, _, res := e.rawSeries(map[string]any{"variables": []string{bad, good}, "columns": cols, "join_dataframes": false, "limit": 5})
		if len(res) != 2 {
			t.Fatalf("raw series: %d %s", r.status, r.body)
		}
		return res
	}
	clean := frames()
	e.sim.SetFaults(Faults{UndecodableVariables: []string{bad}})
	res := frames()
	for _, row := range res[0].([]any) {
		r := row.([]any)
		if r[0] != "n/a" || r[1] != 1e30 || r[2] != "n/a" || r[3] != bad {
			t.Fatalf("undecodable variable's row %v, want [n/a 1e30 n/a %s]", r, bad)
		}
	}
	if len(res[0].([]any)) != 5 {
		t.Errorf("undecodable frame has %d rows, want 5", len(res[0].([]any)))
	}
	if !jsonEqual(res[1], clean[1]) {
		t.Errorf("the other variable's frame changed:\n%v\nwant\n%v", res[1], clean[1])
	}
	want := e.retained(good)
	_, jcols, rows := e.rawSeries(map[string]any{"variables": []string{bad, good}, "limit": 5})
	if len(jcols) != 3 || len(rows) != 5 {
		t.Fatalf("joined: columns %v, %d rows", jcols, len(rows))
	}
	for k, row := range rows {
		r := row.([]any)
		if r[0] != float64(want[k].TimestampMs) || r[1] != "n/a" || r[2] != want[k].Value {
			t.Fatalf("joined row %d = %v, want [%d n/a %v]", k, r, want[k].TimestampMs, want[k].Value)
		}
	}
	// Only raw series is affected.
	expect(t, "values of the undecodable variable", e.get("/api/v1.6/variables/"+bad+"/values?page_size=1"), 200, nil)
	if strings.Contains(string(e.get("/api/v1.6/variables/"+bad+"/values?page_size=1").body), "n/a") {
		t.Error("GET values carries n/a")
	}
}

func TestRejectedVariablesFailTheRawSeriesRequestNamingThem(t *testing.T) {
	e := newEnv(t, Options{})
	ids := e.variableIDs()
	rejected, other := ids[3], ids[1]
	body := map[string]any{"variables": []string{other, rejected, ids[5]}, "join_dataframes": false}
	expect(t, "before the fault", e.post("/api/v1.6/data/raw/series", body), 200, nil)
	// Through the control interface, as a script would.
	expect(t, "set the fault", e.do("PUT", "/_sim/faults", map[string]any{"reject_variables": []string{rejected}}, "-"), 200, nil)
	if f := e.sim.CurrentFaults(); len(f.RejectVariables) != 1 || f.RejectVariables[0] != rejected {
		t.Fatalf("faults after PUT: %+v", f)
	}
	msg := "Variable " + rejected + " cannot be read: invalid data."
	for _, join := range []bool{false, true} {
		body["join_dataframes"] = join
		r := e.post("/api/v1.6/data/raw/series", body)
		expect(t, "a request naming the rejected variable", r, 400, map[string]any{"code": 400001, "message": msg, "detail": map[string]any{"variables": []string{msg}}})
		if k := keys(t, r.body); strings.Join(k, ",") != "code,message,detail" {
			t.Errorf("error keys %v, want the spec's code,message,detail", k)
		}
		if strings.Contains(string(r.body), other) || strings.Contains(string(r.body), ids[5]) {
			t.Errorf("the error names another variable of the request: %s", r.body)
		}
	}
	expect(t, "a request without it", e.post("/api/v1.6/data/raw/series", map[string]any{"variables": []string{other, ids[5]}}), 200, nil)
	expect(t, "GET values of it", e.get("/api/v1.6/variables/"+rejected+"/values"), 200, nil)
	e.sim.SetFaults(Faults{})
	expect(t, "after the fault is cleared", e.post("/api/v1.6/data/raw/series", body), 200, nil)
}

func TestRawSeriesAcceptsAnEndFarInTheFuture(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.sim.Devices()[0]
	ids := []string{d.Variables[0].ID, d.Variables[1].ID}
	now := e.clock.Now()
	// One point an hour ahead, as from a device whose clock runs ahead.
	ahead := now.Add(time.Hour).UnixMilli()
	if err := e.sim.AddPoints(ids[0], []SimPoint{{TimestampMs: ahead, Value: 7}}); err != nil {
		t.Fatal(err)
	}
	end := now.AddDate(100, 0, 0).UnixMilli()
	for _, body := range []map[string]any{
		{"variables": ids, "end": end, "join_dataframes": false},
		{"variables": ids, "start": e.sim.RetentionFloor().UnixMilli(), "end": end, "join_dataframes": false, "limit": 0},
	} {
		r, _, res := e.rawSeries(body)
		if r.status != 200 {
			t.Fatalf("end now+100y: %d %s", r.status, r.body)
		}
		for i, id := range ids {
			want := e.retained(id)
			frame := res[i].([]any)
			if len(frame) != len(want) {
				t.Fatalf("variable %s: %d rows, want every retained point (%d)", id, len(frame), len(want))
			}
			first := frame[0].([]any)
			if first[1] != float64(want[0].TimestampMs) {
				t.Errorf("variable %s: newest row at %v, want %d", id, first[1], want[0].TimestampMs)
			}
		}
		if first := res[0].([]any)[0].([]any); first[1] != float64(ahead) {
			t.Errorf("the point ahead of now is missing: newest row %v", first)
		}
	}
	r := e.get(fmt.Sprintf("/api/v1.6/variables/%s/values?end=%d&page_size=1", ids[0], end))
	expect(t, "GET values with a far end", r, 200, nil)
	if res := r.json(t)["results"].([]any); len(res) != 1 || res[0].(map[string]any)["timestamp"] != float64(ahead) {
		t.Errorf("GET values with a far end: %v", res)
	}
}
