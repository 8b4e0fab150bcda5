package fleet

// The verification of a warehouse against fleetsim through this adapter:
// which requests it makes, and how it reads an aggregation body it cannot
// trust.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/verify"
)

const testToken = "verify-test-token"

// recordingSim serves a fleetsim and records the aggregation bodies; rewrite,
// when set, replaces the aggregation responses.
type recordingSim struct {
	sim     *fleetsim.Sim
	mu      sync.Mutex
	bodies  []map[string]any
	stats   []string
	rewrite func(body []byte) []byte
}

func (r *recordingSim) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	switch {
	case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/data/stats/aggregation/"):
		b, _ := io.ReadAll(req.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		rewrite := r.rewrite
		r.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(b))
		if rewrite == nil {
			r.sim.ServeHTTP(rw, req)
			return
		}
		rec := httptest.NewRecorder()
		r.sim.ServeHTTP(rec, req)
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(rec.Code)
		rw.Write(rewrite(rec.Body.Bytes()))
	case strings.Contains(req.URL.Path, "/statistics/"):
		r.mu.Lock()
		r.stats = append(r.stats, req.URL.Path)
		r.mu.Unlock()
		r.sim.ServeHTTP(rw, req)
	default:
		r.sim.ServeHTTP(rw, req)
	}
}

// simWarehouse is the warehouse as it would be after a perfect sync of sim,
// less the points in missing.
type simWarehouse struct {
	sim     *fleetsim.Sim
	missing map[string]int64
}

func (s simWarehouse) PointStats(_ context.Context, from, to int64) (map[string]verify.Stats, error) {
	out := map[string]verify.Stats{}
	for _, d := range s.sim.Devices() {
		for _, v := range d.Variables {
			var st verify.Stats
			for _, p := range s.sim.Points(v.ID) {
				if p.TimestampMs < from || p.TimestampMs > to || s.missing[v.ID] == p.TimestampMs {
					continue
				}
				if st.Count == 0 {
					st.MinTs = p.TimestampMs
				}
				st.Count++
				st.Sum += p.Value
				st.MaxTs = p.TimestampMs
			}
			if st.Count > 0 {
				out[v.ID] = st
			}
		}
	}
	return out, nil
}

type verifyFixture struct {
	rec        *recordingSim
	v          *verify.Verifier
	wh         simWarehouse
	perRequest int
	vars       []pipeline.Variable
	start, end int64
	src        *Source
}

// setWarehouse makes the fixture's verifier compare the source with wh.
func (f *verifyFixture) setWarehouse(wh simWarehouse) {
	f.wh = wh
	f.v = verify.New(f.src, wh, verify.Options{PerRequest: f.perRequest, InFlight: 2}, nil)
}

func newVerifyFixture(t *testing.T, perRequest int) *verifyFixture {
	t.Helper()
	sim, err := fleetsim.New(fleetsim.Options{Seed: 3, Devices: 4, Variables: 4, Points: 120, Span: 3 * 24 * time.Hour, Tokens: []string{testToken}})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingSim{sim: sim}
	srv := httptest.NewServer(rec)
	t.Cleanup(func() { srv.Close(); sim.Close() })
	api, err := fleetapi.New(fleetapi.Config{BaseURL: srv.URL, Tokens: fleetapi.StaticToken(testToken), MaxElapsed: 5 * time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &verifyFixture{rec: rec, start: sim.RetentionFloor().Add(time.Hour).UnixMilli(), end: time.Now().UnixMilli()}
	for _, d := range sim.Devices() {
		for _, v := range d.Variables {
			f.vars = append(f.vars, pipeline.Variable{ID: v.ID, Label: v.Label, DeviceID: d.ID, DeviceLabel: d.Label})
		}
	}
	f.perRequest = perRequest
	f.src = New(api, Options{})
	f.setWarehouse(simWarehouse{sim: sim})
	return f
}

func TestVerifyAsksForAggregatesOfManyVariablesWithBothBoundsAndNoLimit(t *testing.T) {
	f := newVerifyFixture(t, 6)
	rep, err := f.v.Verify(context.Background(), f.vars, f.start, f.end)
	if err != nil {
		t.Fatal(err)
	}
	// A variable without points in the range joins no row of the joined
	// frame, so it is read singly; every other one comes from the frame.
	empty := 0
	for _, v := range f.vars {
		if len(f.rec.sim.Points(v.ID)) == 0 {
			empty++
		}
	}
	if len(rep.Mismatches) != 0 || rep.Matched != 16 || rep.ViaAggregation != 16-empty || rep.ViaStatistics != empty {
		t.Fatalf("verify of a perfect warehouse (%d empty variables): %+v", empty, rep)
	}
	// 16 variables, 6 per request: 3 requests for count and 3 for sum.
	if len(f.rec.bodies) != 6 {
		t.Fatalf("%d aggregation requests, want 6", len(f.rec.bodies))
	}
	for _, b := range f.rec.bodies {
		if _, ok := b["limit"]; ok {
			t.Fatalf("an aggregation request sends a limit (it truncates the input): %v", b)
		}
		if b["start"] != float64(f.start) || b["end"] != float64(f.end) || b["join_dataframes"] != true {
			t.Fatalf("aggregation body %v; want both bounds %d..%d and join_dataframes true (columns name the variables)", b, f.start, f.end)
		}
	}
	// Only the probe variable and the empty ones are read singly (count and sum).
	if len(f.rec.stats) != 2+2*empty {
		t.Fatalf("%d single statistics requests, want %d for the probe and %d empty variables: %v", len(f.rec.stats), 2+2*empty, empty, f.rec.stats)
	}
}

func TestVerifyConfirmsAMismatchThroughTheSingleStatistics(t *testing.T) {
	f := newVerifyFixture(t, 50)
	victim := f.vars[5]
	pts := f.rec.sim.Points(victim.ID)
	f.setWarehouse(simWarehouse{sim: f.rec.sim, missing: map[string]int64{victim.ID: pts[len(pts)-1].TimestampMs}})
	rep, err := f.v.Verify(context.Background(), f.vars, f.start, f.end)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Mismatches) != 1 || rep.Mismatches[0].VariableID != victim.ID || rep.Mismatches[0].Via != verify.ViaStatistics ||
		rep.Mismatches[0].SourceCount != int64(rep.Mismatches[0].WarehouseCount)+1 {
		t.Fatalf("mismatches %+v; want only %s, confirmed by the statistics endpoint, one point short", rep.Mismatches, victim.ID)
	}
}

func TestVerifyReadsSinglyWhenTheAggregationBodyIsNotAsExpected(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rewrite func([]byte) []byte
	}{
		{"unknown shape", func([]byte) []byte { return []byte(`{"data":{"frames":[]}}`) }},
		{"plausible shape, other numbers", func(b []byte) []byte {
			// Results that parse but mean something else (here: every
			// value doubled) must not turn into false mismatches.
			var body struct {
				Columns []string `json:"columns"`
				Results [][]any  `json:"results"`
			}
			if json.Unmarshal(b, &body) != nil {
				return b
			}
			for _, row := range body.Results {
				for j := 1; j < len(row); j++ {
					if v, ok := row[j].(float64); ok {
						row[j] = 2*v + 1
					}
				}
			}
			out, _ := json.Marshal(body)
			return out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newVerifyFixture(t, 5)
			f.rec.rewrite = tc.rewrite
			rep, err := f.v.Verify(context.Background(), f.vars, f.start, f.end)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Mismatches) != 0 || rep.ViaStatistics != 16 {
				t.Fatalf("with an unexpected aggregation body: %d mismatches, %d variables read singly; want 0 and 16: %+v",
					len(rep.Mismatches), rep.ViaStatistics, rep.Mismatches)
			}
		})
	}
}
