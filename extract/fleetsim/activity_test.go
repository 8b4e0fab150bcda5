package fleetsim

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim/simtest"
)

func TestParseLastActivityModeRoundTrips(t *testing.T) {
	for _, m := range []LastActivityMode{LastActivityAnyWrite, LastActivityNewestWrite, LastActivityNewestTs, LastActivityNone} {
		got, err := ParseLastActivityMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseLastActivityMode(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	if _, err := ParseLastActivityMode("newest"); err == nil {
		t.Error(`ParseLastActivityMode("newest") gave no error`)
	}
	if _, err := New(Options{LastActivity: LastActivityMode(9)}); err == nil {
		t.Error("New accepted an unknown last activity mode")
	}
}

// activities collects the lastActivity of a device and of one of its
// variables from every endpoint that renders them and from the oracle,
// keyed by where it was read; nil stands for null.
func (e *env) activities(devID, varID string) map[string]any {
	e.t.Helper()
	out := map[string]any{}
	findIn := func(path, id string) any {
		r := e.get(path)
		expect(e.t, path, r, 200, nil)
		for _, x := range r.json(e.t)["results"].([]any) {
			if m := x.(map[string]any); m["id"] == id {
				return m["lastActivity"]
			}
		}
		e.t.Fatalf("%s does not list %s", path, id)
		return nil
	}
	r := e.get("/api/v2.0/devices/" + devID + "/")
	out["GET device"] = r.json(e.t)["lastActivity"]
	out["device list"] = findIn("/api/v2.0/devices/?page_size=1000", devID)
	for _, o := range e.sim.Organizations() {
		for _, d := range e.sim.Devices() {
			if d.ID == devID && d.Organization == o.ID {
				out["organization's devices"] = findIn("/api/v2.0/organizations/"+o.ID+"/devices/?page_size=1000", devID)
			}
		}
	}
	r = e.get("/api/v2.0/variables/" + varID + "/")
	out["GET variable"] = r.json(e.t)["lastActivity"]
	out["variable list"] = findIn("/api/v2.0/variables/?page_size=1000", varID)
	out["device's variable list"] = findIn("/api/v2.0/devices/"+devID+"/variables/", varID)
	for _, d := range e.sim.Devices() {
		if d.ID != devID {
			continue
		}
		out["oracle device"] = orNull(d.LastActivityMs)
		for _, v := range d.Variables {
			if v.ID == varID {
				out["oracle variable"] = orNull(v.LastActivityMs)
			}
		}
	}
	return out
}

func orNull(ms int64) any {
	if ms == 0 {
		return nil
	}
	return float64(ms)
}

// checkActivity fails unless every reading of the device's and the
// variable's lastActivity is want (-1: null).
func (e *env) checkActivity(what, devID, varID string, want int64) {
	e.t.Helper()
	w := orNull(want)
	if want < 0 {
		w = nil
	}
	for where, got := range e.activities(devID, varID) {
		if got != w {
			e.t.Errorf("%s: lastActivity in %s = %v, want %v", what, where, got, w)
		}
	}
}

func TestLastActivityFollowsTheChosenReading(t *testing.T) {
	const minute = int64(time.Minute / time.Millisecond)
	// The variable's newest generated point is at T0, the start, and every
	// other variable of its device too. Each step advances the clock one
	// minute (T1, T2, …) and writes one point.
	type step struct {
		name string
		ts   func(t0, now int64) int64
		// want per mode: any-write, newest-write, newest-ts (none is
		// always null).
		want func(t0 int64) [3]int64
	}
	steps := []step{
		{"generated data", nil, func(t0 int64) [3]int64 { return [3]int64{t0, t0, t0} }},
		{"a late point", func(t0, now int64) int64 { return t0 - 5000 },
			func(t0 int64) [3]int64 { return [3]int64{t0 + minute, t0, t0} }},
		{"a new point", func(t0, now int64) int64 { return now - 30000 },
			func(t0 int64) [3]int64 { return [3]int64{t0 + 2*minute, t0 + 2*minute, t0 + 2*minute - 30000} }},
		{"a point stamped an hour ahead", func(t0, now int64) int64 { return now + 60*minute },
			func(t0 int64) [3]int64 { return [3]int64{t0 + 3*minute, t0 + 3*minute, t0 + 63*minute} }},
		{"a late point behind the one ahead", func(t0, now int64) int64 { return now - 1000 },
			func(t0 int64) [3]int64 { return [3]int64{t0 + 4*minute, t0 + 3*minute, t0 + 63*minute} }},
	}
	for mi, mode := range []LastActivityMode{LastActivityAnyWrite, LastActivityNewestWrite, LastActivityNewestTs, LastActivityNone} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, Options{LastActivity: mode})
			d := e.sim.Devices()[0]
			v := d.Variables[0]
			t0 := e.sim.StartTime().UnixMilli()
			for i, st := range steps {
				if st.ts != nil {
					e.clock.Advance(time.Minute)
					ts := st.ts(t0, e.clock.Now().UnixMilli())
					if err := e.sim.AddPoints(v.ID, []SimPoint{{TimestampMs: ts, Value: float64(i)}}); err != nil {
						t.Fatal(err)
					}
				}
				want := int64(-1)
				if mi < 3 {
					want = st.want(t0)[mi]
				}
				e.checkActivity(fmt.Sprintf("after %s", st.name), d.ID, v.ID, want)
			}
			if mode == LastActivityNewestTs {
				if la := e.sim.Devices()[0].LastActivityMs; la <= e.clock.Now().UnixMilli() {
					t.Errorf("newest-ts: the device's lastActivity %d is not ahead of now %d", la, e.clock.Now().UnixMilli())
				}
			}

			// A device whose variables never had data has a null
			// lastActivity in every mode; one point gives it the
			// variable's.
			nd, err := e.sim.AddDevice("quiet", 2)
			if err != nil {
				t.Fatal(err)
			}
			e.checkActivity("a device without data", nd.ID, nd.Variables[0].ID, -1)
			e.clock.Advance(time.Minute)
			now := e.clock.Now().UnixMilli()
			if err := e.sim.AddPoints(nd.Variables[1].ID, []SimPoint{{TimestampMs: now - 10, Value: 1}}); err != nil {
				t.Fatal(err)
			}
			want := [4]int64{now, now, now - 10, -1}[mi]
			for where, got := range e.activities(nd.ID, nd.Variables[1].ID) {
				w := orNull(want)
				if want < 0 {
					w = nil
				}
				if got != w {
					t.Errorf("one point on a new device: lastActivity in %s = %v, want %v", where, got, w)
				}
			}
			for where, got := range e.activities(nd.ID, nd.Variables[0].ID) {
				if where == "GET variable" || where == "variable list" || where == "device's variable list" || where == "oracle variable" {
					if got != nil {
						t.Errorf("the new device's empty variable: lastActivity in %s = %v, want null", where, got)
					}
				}
			}
		})
	}
}

func TestWriterAndLivePointsGoThroughTheLastActivityReading(t *testing.T) {
	for _, c := range []struct {
		mode LastActivityMode
		// moves says whether a late point moves lastActivity.
		moves bool
	}{{LastActivityAnyWrite, true}, {LastActivityNewestWrite, false}, {LastActivityNewestTs, false}} {
		t.Run(c.mode.String(), func(t *testing.T) {
			e := newEnv(t, Options{LastActivity: c.mode})
			d := e.sim.Devices()[0]
			v := d.Variables[0]
			t0 := e.sim.StartTime().UnixMilli()
			e.clock.Advance(time.Minute)
			w, err := e.sim.StartWriter(WriterOptions{Seed: 3, LatePerStep: 1, Variables: []string{v.ID}})
			if err != nil {
				t.Fatal(err)
			}
			if st := w.Stop(); st.Late < 1 || st.New+st.Ahead+st.ReportOnce != 0 {
				t.Fatalf("writer stats %+v, want late points only", st)
			}
			want := t0
			if c.moves {
				want = e.clock.Now().UnixMilli()
			}
			e.checkActivity("after late points of a writer", d.ID, v.ID, want)

			// Live mode's late points take the same path.
			clock := simtest.NewClock(fixedNow())
			ls, err := New(Options{Seed: 5, Devices: 1, Variables: 1, Points: 300, Now: clock.Now, LastActivity: c.mode,
				Live: LiveOptions{LatePointsPerSecond: 20, LateMaxAge: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			defer ls.Close()
			clock.Advance(time.Minute) // long before the first tick
			deadline := time.Now().Add(10 * time.Second)
			for {
				ls.mu.RLock()
				late := ls.live.lateAdded
				ls.mu.RUnlock()
				if late > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("live mode wrote no late point in 10 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			ls.Close()
			want = fixedNow().UnixMilli()
			if c.moves {
				want = clock.Now().UnixMilli()
			}
			if got := ls.Devices()[0].LastActivityMs; got != want {
				t.Errorf("after late live points: device lastActivity %d, want %d", got, want)
			}
		})
	}
}
