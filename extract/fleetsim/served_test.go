package fleetsim

import (
	"encoding/json"
	"testing"
)

// RowsServed counts the points raw-series responses carried, per-variable
// frames and joined ones alike, as a client decoding them would; a reset
// zeroes it, and /_sim/served reports it.
func TestRowsServedCountsThePointsOfRawSeriesResponses(t *testing.T) {
	e := newEnv(t, Options{})
	ids := e.variableIDs()[:3]
	// decoded counts the points of a response: a row of a per-variable
	// frame is one, a joined row one per variable with a value.
	decoded := func(r response, joined bool) int64 {
		t.Helper()
		var n int64
		if joined {
			var body struct {
				Results [][]any `json:"results"` // one frame of rows
			}
			if err := json.Unmarshal(r.body, &body); err != nil {
				t.Fatalf("decode %.200s: %v", r.body, err)
			}
			for _, row := range body.Results {
				for _, cell := range row[1:] {
					if cell != nil {
						n++
					}
				}
			}
			return n
		}
		var body struct {
			Results [][][]any `json:"results"` // a frame per variable
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("decode %.200s: %v", r.body, err)
		}
		for _, frame := range body.Results {
			n += int64(len(frame))
		}
		return n
	}
	served := func() int64 {
		t.Helper()
		var got map[string]int64
		if err := json.Unmarshal(e.get("/_sim/served").body, &got); err != nil {
			t.Fatal(err)
		}
		return got["raw_series_rows"]
	}
	var want int64
	for _, joined := range []bool{false, true} {
		r := e.post("/api/v1.6/data/raw/series", map[string]any{"variables": ids, "columns": []string{"timestamp", "value.value"}, "join_dataframes": joined, "limit": 100})
		expect(t, "raw series", r, 200, nil)
		want += decoded(r, joined)
	}
	if want == 0 {
		t.Fatal("the responses carried no point: the test reads nothing")
	}
	if got := e.sim.RowsServed(); got != want {
		t.Errorf("RowsServed %d, the responses carried %d points", got, want)
	}
	if got := served(); got != want {
		t.Errorf("/_sim/served says %d, the responses carried %d points", got, want)
	}
	e.sim.ResetCounters()
	if got := served(); got != 0 {
		t.Errorf("after a reset /_sim/served says %d, want 0", got)
	}
}

// POST /_sim/points writes several variables' points at once, and nothing
// when one id is unknown.
func TestControlPointsAddsToSeveralVariablesOrNone(t *testing.T) {
	e := newEnv(t, Options{})
	ids := e.variableIDs()
	before := map[string]int{ids[0]: e.sim.PointCount(ids[0]), ids[1]: e.sim.PointCount(ids[1])}
	now := e.clock.Now().UnixMilli()
	r := e.post("/_sim/points", map[string]any{
		ids[0]: []map[string]any{{"timestamp": now + 1, "value": 1}, {"timestamp": now + 2, "value": 2}},
		ids[1]: []map[string]any{{"timestamp": now + 3, "value": 3, "context": map[string]any{"lat": 1.5}}},
	})
	expect(t, "POST /_sim/points", r, 200, map[string]any{"added": 3})
	for id, add := range map[string]int{ids[0]: 2, ids[1]: 1} {
		if got := e.sim.PointCount(id); got != before[id]+add {
			t.Errorf("variable %s holds %d points, want %d", id, got, before[id]+add)
		}
	}
	r = e.post("/_sim/points", map[string]any{
		ids[0]:   []map[string]any{{"timestamp": now + 10, "value": 1}},
		"nobody": []map[string]any{{"timestamp": now + 10, "value": 1}},
	})
	expect(t, "POST /_sim/points naming an unknown variable", r, 404, nil)
	if got := e.sim.PointCount(ids[0]); got != before[ids[0]]+2 {
		t.Errorf("a batch naming an unknown variable wrote: %s holds %d points, want %d", ids[0], got, before[ids[0]]+2)
	}
}
