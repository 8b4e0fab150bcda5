package fleetsim

import (
	"encoding/json"
	"strings"
	"testing"
)

// The response shapes behind flags that the benchmarks' memory section
// measures (docs/fleetsim.md): contexts padded to a size, and `results`
// before `columns`.

// rawFrames posts a raw-series request for ids with the client's columns
// and returns the body and each frame's contexts as served (compact JSON).
func (e *env) rawFrames(ids []string, join bool) (body []byte, contexts [][]string) {
	e.t.Helper()
	r := e.post("/api/v1.6/data/raw/series", map[string]any{"variables": ids, "join_dataframes": join,
		"columns": []string{"timestamp", "value.value", "value.context"}, "start": e.sim.RetentionFloor().UnixMilli()})
	if r.status != 200 {
		e.t.Fatalf("raw series: status %d: %s", r.status, r.body)
	}
	var m struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil {
		e.t.Fatalf("raw series body: %v", err)
	}
	if join {
		return r.body, nil
	}
	for _, f := range m.Results {
		var rows [][]json.RawMessage
		if err := json.Unmarshal(f, &rows); err != nil {
			e.t.Fatalf("frame: %v", err)
		}
		var cs []string
		for _, row := range rows {
			cs = append(cs, string(row[2]))
		}
		contexts = append(contexts, cs)
	}
	return r.body, contexts
}

func TestContextBytesPadsEveryGeneratedContextAndKeepsWhatItHeld(t *testing.T) {
	const want = 200
	plain, padded := newEnv(t, Options{}), newEnv(t, Options{ContextBytes: want})
	d := plain.sim.Devices()[0]
	var ids []string
	for _, v := range d.Variables {
		ids = append(ids, v.ID)
	}
	_, before := plain.rawFrames(ids, false)
	_, after := padded.rawFrames(ids, false)
	n, pads := 0, map[string]bool{}
	for i := range before {
		if len(after[i]) != len(before[i]) || len(before[i]) == 0 {
			t.Fatalf("frame %d: %d rows padded, %d plain", i, len(after[i]), len(before[i]))
		}
		for k, c := range after[i] {
			if len(c) != want {
				t.Fatalf("frame %d row %d: context of %d bytes, want %d: %s", i, k, len(c), want, c)
			}
			var got, orig map[string]any
			if err := json.Unmarshal([]byte(c), &got); err != nil {
				t.Fatalf("frame %d row %d: context is not a JSON object: %v: %s", i, k, err, c)
			}
			if err := json.Unmarshal([]byte(before[i][k]), &orig); err != nil {
				t.Fatal(err)
			}
			pad, _ := got["pad"].(string)
			delete(got, "pad")
			if pad == "" || !jsonEqual(got, orig) {
				t.Fatalf("frame %d row %d: padded context %s, want %s plus a pad", i, k, c, before[i][k])
			}
			pads[pad] = true
			n++
		}
	}
	if len(pads) < n/2 {
		t.Errorf("%d distinct pads for %d points: contexts should differ from point to point", len(pads), n)
	}
	// The oracle tests compare against says the same.
	p := padded.retained(ids[0])[0]
	b, _ := json.Marshal(p.Context)
	if p.Context["pad"] == nil || len(b) != want {
		t.Errorf("Points() gives the context %s (%d bytes), want the padded one of %d", b, len(b), want)
	}
}

func TestPadContextReachesTheSizeOrLeavesALongerContext(t *testing.T) {
	for _, c := range []struct {
		ctx  string
		want int
		out  int
	}{
		{`{}`, 12, 12},
		{`{}`, 10, 10},
		{`{}`, 9, 10}, // `{"pad":""}` is the shortest padded object
		{`{"lat":1.5}`, 40, 40},
		{`{"lat":1.5}`, 11, 11}, // long enough already
		{`{"lat":1.5}`, 5, 11},
		{`{}`, 1000, 1000},
	} {
		b := padContext([]byte("x"+c.ctx), 1, c.want, 0x0123456789abcdef)
		got := string(b[1:])
		var m map[string]any
		if err := json.Unmarshal([]byte(got), &m); err != nil || len(got) != c.out || !strings.HasPrefix(got, strings.TrimSuffix(c.ctx, "}")) {
			t.Errorf("padContext(%s, %d) = %s (%d bytes, %v), want a JSON object of %d bytes extending it", c.ctx, c.want, got, len(got), err, c.out)
		}
	}
}

func TestResultsFirstServesTheSameResponseInTheOtherOrder(t *testing.T) {
	plain, first := newEnv(t, Options{}), newEnv(t, Options{ResultsFirst: true})
	d := plain.sim.Devices()[0]
	ids := []string{d.Variables[3].ID, d.Variables[0].ID}
	for _, join := range []bool{false, true} {
		a, _ := plain.rawFrames(ids, join)
		b, _ := first.rawFrames(ids, join)
		if k := keys(t, a); strings.Join(k, ",") != "columns,results" {
			t.Fatalf("join %v: keys %v without the flag", join, k)
		}
		if k := keys(t, b); strings.Join(k, ",") != "results,columns" {
			t.Fatalf("join %v: keys %v with ResultsFirst, want results first", join, k)
		}
		var x, y any
		if err := json.Unmarshal(a, &x); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &y); err != nil {
			t.Fatalf("join %v: %v", join, err)
		}
		if !jsonEqual(x, y) {
			t.Errorf("join %v: the responses differ in more than their members' order", join)
		}
	}
}
