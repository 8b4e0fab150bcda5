package fleetsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func fixedNow() time.Time { return time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC) }

func TestSameSeedGivesTheSameFleetAndPoints(t *testing.T) {
	opts := Options{Seed: 7, Devices: 5, Variables: 5, Points: 200, Now: fixedNow}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Devices(), b.Devices()) {
		t.Fatalf("devices differ for the same seed:\n%+v\n%+v", a.Devices()[0], b.Devices()[0])
	}
	for _, f := range []func(*Sim) any{
		func(s *Sim) any { return s.Groups() }, func(s *Sim) any { return s.Organizations() }, func(s *Sim) any { return s.Events() },
	} {
		if !reflect.DeepEqual(f(a), f(b)) {
			t.Fatalf("metadata differs for the same seed: %+v vs %+v", f(a), f(b))
		}
	}
	for _, d := range a.Devices() {
		for _, v := range d.Variables {
			if !reflect.DeepEqual(a.Points(v.ID), b.Points(v.ID)) {
				t.Fatalf("points of %s differ for the same seed", v.ID)
			}
		}
	}
	c, err := New(Options{Seed: 8, Devices: 5, Variables: 5, Points: 200, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	if a.Devices()[0].ID == c.Devices()[0].ID {
		t.Fatalf("seeds 7 and 8 gave the same device id %s", a.Devices()[0].ID)
	}
}

func TestGeneratedFleetHasTheQuirksClientsMustMeet(t *testing.T) {
	s, err := New(Options{Seed: 1, Devices: 6, Variables: 5, Points: 100, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	floor := s.RetentionFloor().UnixMilli()
	var unicode, spaces, empty, old, positions, otherCtx bool
	labels := map[string]bool{}
	ids := map[string]bool{}
	for _, d := range s.Devices() {
		if labels[d.Label] {
			t.Fatalf("device label %q is not unique", d.Label)
		}
		labels[d.Label] = true
		if utf8.RuneCountInString(d.Label) != len(d.Label) {
			unicode = true
		}
		spaces = spaces || strings.Contains(d.Label, " ")
		if len(d.Properties) == 0 || len(d.Tags) == 0 {
			t.Errorf("device %s lacks properties or tags", d.Label)
		}
		vl := map[string]bool{}
		var maxAct int64
		for _, v := range d.Variables {
			if vl[v.Label] {
				t.Errorf("variable label %q repeats within device %s", v.Label, d.Label)
			}
			vl[v.Label] = true
			if ids[v.ID] {
				t.Fatalf("variable id %s repeats", v.ID)
			}
			ids[v.ID] = true
			pts := s.Points(v.ID)
			if len(pts) == 0 {
				empty = true
				if v.LastActivityMs != 0 {
					t.Errorf("empty variable %s has lastActivity %d", v.ID, v.LastActivityMs)
				}
				continue
			}
			if v.LastActivityMs != pts[len(pts)-1].TimestampMs {
				t.Errorf("variable %s lastActivity %d, want its newest point %d", v.ID, v.LastActivityMs, pts[len(pts)-1].TimestampMs)
			}
			maxAct = max(maxAct, v.LastActivityMs)
			for i, p := range pts {
				if i > 0 && p.TimestampMs <= pts[i-1].TimestampMs {
					t.Fatalf("points of %s not strictly increasing at %d", v.ID, i)
				}
				if p.TimestampMs < floor {
					old = true
				}
				switch {
				case v.Kind == "position":
					_, okLat := p.Context["lat"].(float64)
					_, okLng := p.Context["lng"].(float64)
					if !okLat || !okLng {
						t.Fatalf("position point without lat/lng: %+v", p)
					}
					positions = true
				case p.Context != nil:
					otherCtx = true
				}
			}
		}
		if d.LastActivityMs != maxAct {
			t.Errorf("device %s lastActivity %d, want max of its variables %d", d.Label, d.LastActivityMs, maxAct)
		}
	}
	for what, ok := range map[string]bool{"a unicode label": unicode, "a label with spaces": spaces, "an empty variable": empty,
		"points older than retention": old, "position points": positions, "a non-position context": otherCtx} {
		if !ok {
			t.Errorf("generated fleet has no %s", what)
		}
	}
	if len(s.Organizations()) < 2 {
		t.Errorf("want at least 2 organizations, got %d", len(s.Organizations()))
	}
	for _, g := range s.Groups()[:1] {
		if len(g.Devices) == 0 {
			t.Errorf("group %s has no members", g.Label)
		}
	}
	ev := s.Events()
	if len(ev) == 0 || len(ev[0].Logs) < 20 {
		t.Fatalf("want an event with a long log history, got %d events", len(ev))
	}
}

func TestPointsSpanEndsAtStartTime(t *testing.T) {
	s, err := New(Options{Seed: 1, Devices: 1, Variables: 1, Points: 1000, Span: time.Hour, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	pts := s.Points(s.Devices()[0].Variables[0].ID)
	first, last := pts[0].TimestampMs, pts[len(pts)-1].TimestampMs
	if last != fixedNow().UnixMilli() || first < fixedNow().Add(-time.Hour).UnixMilli() {
		t.Fatalf("points span [%d, %d], want within the hour ending %d", first, last, fixedNow().UnixMilli())
	}
}

func TestNewRejectsImpossibleOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"negative devices":          {Devices: -1},
		"more points than ms":       {Devices: 1, Variables: 1, Points: 2000, Span: time.Second},
		"error rate above one":      {Faults: Faults{ErrorRate: 1.5}},
		"negative fault latency":    {Faults: Faults{Latency: -time.Second}},
		"negative retention window": {Retention: -time.Hour},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
}

func TestBigFleetsStayCompactInMemory(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := New(Options{Seed: 1, Devices: 50, Variables: 10, Points: 40_000, Span: 30 * 24 * time.Hour, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	total := 0
	for _, d := range s.Devices() {
		for _, v := range d.Variables {
			total += s.PointCount(v.ID)
		}
	}
	id := s.Devices()[0].Variables[0].ID
	floor := s.RetentionFloor().UnixMilli()
	if got, want := s.PointCountBetween(id, floor, fixedNow().UnixMilli()), s.PointCount(id); got != want {
		t.Fatalf("PointCountBetween over the whole window %d, want %d", got, want)
	}
	if total < 19_900_000 {
		t.Fatalf("fleet holds %d points, want about 20 M", total)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 32<<20 {
		t.Fatalf("a 20 M-point fleet takes %d MiB of heap, want < 32 MiB", grew>>20)
	}
	big, err := New(Options{Seed: 1, Devices: 1000, Variables: 10, Points: 10, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(big.Devices()) * len(big.Devices()[0].Variables); n != 10_000 {
		t.Fatalf("want 10 000 variables, got %d", n)
	}
}

func TestAddPointsStoresNewLateAndReplacingPoints(t *testing.T) {
	e := newEnv(t, Options{})
	_, v, before, newest := e.firstVariable()
	e.clock.Advance(time.Minute)
	late := SimPoint{TimestampMs: newest.TimestampMs - 1, Value: 99.5, Context: map[string]any{"source": "late"}}
	replace := SimPoint{TimestampMs: before[10].TimestampMs, Value: -1}
	fresh := SimPoint{TimestampMs: newest.TimestampMs + 5000, Value: 1.25}
	if err := e.sim.AddPoints(v.ID, []SimPoint{fresh, late, replace}); err != nil {
		t.Fatal(err)
	}
	after := e.sim.Points(v.ID)
	if len(after) != len(before)+2 {
		t.Fatalf("after adding 2 new points and 1 replacement: %d points, want %d", len(after), len(before)+2)
	}
	find := func(ts int64) SimPoint {
		for _, p := range after {
			if p.TimestampMs == ts {
				return p
			}
		}
		t.Fatalf("no point at %d", ts)
		return SimPoint{}
	}
	if p := find(replace.TimestampMs); p.Value != -1 {
		t.Errorf("replacing point: value %v, want -1", p.Value)
	}
	if p := find(late.TimestampMs); p.Value != 99.5 || p.Context["source"] != "late" {
		t.Errorf("late point came back as %+v", p)
	}
	if got := e.sim.Devices()[0].Variables[0].LastActivityMs; got != e.clock.Now().UnixMilli() {
		t.Errorf("lastActivity after AddPoints = %d, want the time of the addition %d", got, e.clock.Now().UnixMilli())
	}
	// The API serves them too, with created_at = the time of the addition.
	r := e.get(fmt.Sprintf("/api/v1.6/variables/%s/values?start=%d&end=%d", v.ID, late.TimestampMs, late.TimestampMs))
	expect(t, "late point over the API", r, 200, map[string]any{"count": 1, "next": nil, "previous": nil, "results": []any{
		map[string]any{"timestamp": late.TimestampMs, "value": 99.5, "context": map[string]any{"source": "late"}, "created_at": e.clock.Now().UnixMilli()},
	}})
	if err := e.sim.AddPoints("nope", []SimPoint{fresh}); !errors.Is(err, ErrNotFound) {
		t.Errorf("AddPoints to an unknown variable: %v, want ErrNotFound", err)
	}
}

func TestDeleteAndAddDevice(t *testing.T) {
	e := newEnv(t, Options{})
	victim := e.sim.Devices()[0]
	if err := e.sim.DeleteDevice("~" + victim.Label); err != nil {
		t.Fatal(err)
	}
	expect(t, "deleted device", e.get("/api/v2.0/devices/"+victim.ID+"/"), 404, map[string]any{"code": 404001, "message": "The request was not found."})
	expect(t, "values of a deleted device's variable", e.get("/api/v1.6/variables/"+victim.Variables[0].ID+"/values"), 404, nil)
	for _, g := range e.sim.Groups() {
		for _, m := range g.Devices {
			if m == victim.ID {
				t.Fatalf("deleted device still in group %s", g.Label)
			}
		}
	}
	if err := e.sim.DeleteDevice(victim.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting twice: %v, want ErrNotFound", err)
	}
	d, err := e.sim.AddDevice("newcomer 1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Variables) != 3 || d.Label != "newcomer 1" {
		t.Fatalf("AddDevice gave %+v", d)
	}
	expect(t, "new device by label", e.get("/api/v2.0/devices/~newcomer%201/"), 200, nil)
	if _, err := e.sim.AddDevice("newcomer 1", 1); !errors.Is(err, ErrConflict) {
		t.Fatalf("duplicate label: %v, want ErrConflict", err)
	}
	r := e.get("/api/v1.6/variables/" + d.Variables[0].ID + "/values")
	expect(t, "a new device's empty variable", r, 200, map[string]any{"count": 0, "next": nil, "previous": nil, "results": []any{}})
}

func TestControlInterfaceOverHTTP(t *testing.T) {
	e := newEnv(t, Options{})
	v := e.sim.Devices()[0].Variables[1]
	e.get("/api/v2.0/devices/")
	r := e.do("GET", "/_sim/counters", nil, "-")
	expect(t, "counters", r, 200, map[string]any{"GET /api/v2.0/devices/ 200": 1})

	r = e.do("POST", "/_sim/variables/"+v.ID+"/points", []map[string]any{{"timestamp": 1795000000000, "value": 3.5, "context": map[string]any{"k": "v"}}}, "-")
	expect(t, "add points", r, 200, map[string]any{"added": 1})
	r = e.do("GET", "/_sim/variables/"+v.ID+"/points", nil, "-")
	var pts []SimPoint
	if err := json.Unmarshal(r.body, &pts); err != nil || len(pts) != len(e.sim.Points(v.ID)) {
		t.Fatalf("points over control: %v, %d points", err, len(pts))
	}
	r = e.do("POST", "/_sim/tokens", map[string]any{"token": "fresh", "kind": "account", "ttl": "1m"}, "-")
	expect(t, "add token", r, 204, nil)
	expect(t, "organizations with the added account token", e.do("GET", "/api/v2.0/organizations/", nil, "fresh"), 200, nil)
	expect(t, "expire tokens", e.do("POST", "/_sim/tokens/expire", nil, "-"), 204, nil)
	expect(t, "expired token", e.do("GET", "/api/v2.0/devices/", nil, "fresh"), 401, nil)
	expect(t, "expired test token", e.get("/api/v2.0/devices/"), 401, nil)
	expect(t, "renew test token", e.do("POST", "/_sim/tokens", map[string]any{"token": testToken}, "-"), 204, nil)

	r = e.do("POST", "/_sim/devices", map[string]any{"label": "via-http", "variables": 2}, "-")
	expect(t, "add device", r, 201, nil)
	expect(t, "add device again", e.do("POST", "/_sim/devices", map[string]any{"label": "via-http", "variables": 2}, "-"), 409, nil)
	expect(t, "delete device", e.do("DELETE", "/_sim/devices/~via-http", nil, "-"), 204, nil)
	expect(t, "delete unknown device", e.do("DELETE", "/_sim/devices/~via-http", nil, "-"), 404, nil)

	r = e.do("PUT", "/_sim/faults", map[string]any{"rate_limit_rate": 1, "retry_after": "7"}, "-")
	expect(t, "set faults", r, 200, nil)
	r = e.get("/api/v2.0/devices/")
	if r.status != 429 || r.header.Get("Retry-After") != "7" {
		t.Fatalf("with rate_limit_rate 1: %d Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
	expect(t, "control is never faulted", e.do("GET", "/_sim/info", nil, "-"), 200, nil)
	expect(t, "clear faults", e.do("DELETE", "/_sim/faults", nil, "-"), 204, nil)
	expect(t, "after clearing faults", e.get("/api/v2.0/devices/"), 200, nil)
	expect(t, "reset counters", e.do("DELETE", "/_sim/counters", nil, "-"), 204, nil)
	expect(t, "counters after reset", e.do("GET", "/_sim/counters", nil, "-"), 200, map[string]any{})
	for _, p := range []string{"/_sim/groups", "/_sim/organizations", "/_sim/events", "/_sim/devices", "/_sim/faults"} {
		expect(t, p, e.do("GET", p, nil, "-"), 200, nil)
	}
	expect(t, "unknown control endpoint", e.do("GET", "/_sim/nope", nil, "-"), 404, nil)
	expect(t, "bad faults body", e.do("PUT", "/_sim/faults", map[string]any{"cut_rate": 2}, "-"), 400, nil)
}

func TestLiveModeAddsNewAndLatePoints(t *testing.T) {
	s, err := New(Options{Seed: 1, Devices: 2, Variables: 2, Points: 50, Live: LiveOptions{PointsPerSecond: 200, LatePointsPerSecond: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := map[string]int64{}
	total := 0
	for _, d := range s.Devices() {
		for _, v := range d.Variables {
			start[v.ID] = v.LastActivityMs
			total += s.PointCount(v.ID)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.RLock()
		added, late := s.live.added, s.live.lateAdded
		s.mu.RUnlock()
		if added >= 20 && late >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live mode added %d new and %d late points in 10 s", added, late)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Close()
	now := 0
	moved := false
	for _, d := range s.Devices() {
		for _, v := range d.Variables {
			now += s.PointCount(v.ID)
			moved = moved || v.LastActivityMs > start[v.ID]
		}
	}
	if now <= total || !moved {
		t.Fatalf("live mode: %d points (was %d), lastActivity moved: %v", now, total, moved)
	}
}

func TestReadsStreamWhileLivePointsArrive(t *testing.T) {
	e := newEnv(t, Options{Devices: 2, Variables: 2, Points: 2000, Now: time.Now, Live: LiveOptions{PointsPerSecond: 2000, LatePointsPerSecond: 1000}})
	ids := e.variableIDs()
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := 0; i < 15; i++ {
				r := e.do("POST", "/api/v1.6/data/raw/series", map[string]any{"variables": ids, "limit": 0, "join_dataframes": i%2 == 0}, testToken)
				if r.status != 200 {
					done <- fmt.Errorf("raw series: %d %s", r.status, r.body)
					return
				}
				if err := e.sim.AddPoints(ids[g%len(ids)], []SimPoint{{TimestampMs: time.Now().UnixMilli() - int64(i*1000+g), Value: 1}}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		pts := e.sim.Points(id)
		for i := 1; i < len(pts); i++ {
			if pts[i].TimestampMs <= pts[i-1].TimestampMs {
				t.Fatalf("variable %s: points out of order or duplicated at %d", id, i)
			}
		}
	}
}

// A step long behind its tick adds the points of maxLiveStep, not of the
// whole delay: catching up at once made each step on a loaded machine
// longer than the last.
func TestLiveStepCatchesUpAtMostMaxLiveStep(t *testing.T) {
	s, err := New(Options{Devices: 2, Variables: 2, Points: 100, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// No live rates at New, so no live goroutine: the steps below are the
	// only ones.
	s.opts.Live = LiveOptions{PointsPerSecond: 100, LatePointsPerSecond: 50}
	s.live.rnd = rand.New(rand.NewSource(1))
	s.liveStep(60)
	if want := int(100 * maxLiveStep.Seconds()); s.live.added != want || s.live.lateAdded != want/2 {
		t.Errorf("a minute-late step added %d new and %d late points, want %d and %d", s.live.added, s.live.lateAdded, want, want/2)
	}
	s.liveStep(0.5)
	if s.live.added != 150 || s.live.lateAdded != 75 {
		t.Errorf("and a half-second step: %d new and %d late points, want 150 and 75", s.live.added, s.live.lateAdded)
	}
}
