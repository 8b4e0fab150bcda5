package fleetapi

// The data API: values, statistics, aggregation, raw series and the time-range
// rules. Each test names the spec rule it checks; the harness is in
// conformance_test.go.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fleetsync/fleetsync/extract/fleetsim"

	"github.com/fleetsync/fleetsync/extract/fleetsim/simtest"
)

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
