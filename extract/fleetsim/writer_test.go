package fleetsim

import (
	"errors"
	"math"
	"testing"
	"time"
)

// waitStats polls the writer until ok holds, for at most 10 s.
func waitStats(t *testing.T, w *Writer, ok func(WriterStats) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(w.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("writer stats after 10 s: %+v", w.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newestTs is the greatest timestamp of pts (ascending), or minTs.
func newestOf(pts []SimPoint) int64 {
	if len(pts) == 0 {
		return minTs
	}
	return pts[len(pts)-1].TimestampMs
}

func TestWriterWritesNewLateAheadAndReportOncePoints(t *testing.T) {
	e := newEnv(t, Options{Devices: 3, Variables: 4, Points: 200, Now: time.Now})
	ids := e.variableIDs()
	before := map[string][]SimPoint{}
	for _, id := range ids {
		before[id] = e.sim.Points(id)
	}
	w, err := e.sim.StartWriter(WriterOptions{Seed: 7, Interval: 5 * time.Millisecond, NewPerStep: 3, LatePerStep: 2, AheadMax: time.Hour, ReportOnce: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	once := w.ReportOnceVariables()
	if len(once) != 3 {
		t.Fatalf("report-once variables %v: want a quarter of %d", once, len(ids))
	}
	if st := w.Stats(); st.ReportOnce != 3 {
		t.Fatalf("after StartWriter returned: %+v, want the 3 report-once points written", st)
	}
	waitStats(t, w, func(s WriterStats) bool { return s.New >= 30 && s.Late >= 10 && s.Ahead >= 5 })
	st := w.Stop()
	if again := w.Stop(); again != st {
		t.Fatalf("second Stop gave %+v, first %+v", again, st)
	}
	now := time.Now().UnixMilli()

	added := 0
	ahead := 0
	for _, id := range ids {
		after := e.sim.Points(id)
		added += len(after) - len(before[id])
		for _, p := range after {
			if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
				t.Fatalf("variable %s: the writer wrote a non-finite value at %d", id, p.TimestampMs)
			}
			if p.TimestampMs > now+1000 {
				ahead++
			}
		}
	}
	if want := st.New + st.Late + st.Ahead + st.ReportOnce; added != want {
		t.Errorf("the oracle holds %d more points, the writer reports %d (%+v)", added, want, st)
	}
	if ahead == 0 {
		t.Errorf("no point more than 1 s ahead of now after %d ahead points with AheadMax 1h", st.Ahead)
	}
	for _, id := range once {
		after := e.sim.Points(id)
		if len(after) != len(before[id])+1 {
			t.Errorf("report-once variable %s: %d points after the run, want %d", id, len(after), len(before[id])+1)
			continue
		}
		if p := after[len(after)-1]; p.TimestampMs <= newestOf(before[id]) || p.TimestampMs > now {
			t.Errorf("report-once variable %s: its point at %d is not a new one (newest before %d, now %d)", id, p.TimestampMs, newestOf(before[id]), now)
		}
	}

	// The oracle and the raw-series endpoint agree on every variable.
	// (A minute inside the window, which moves with the real clock; no
	// point lies that close to the floor.)
	start := e.sim.RetentionFloor().Add(time.Minute).UnixMilli()
	r, _, res := e.rawSeries(map[string]any{"variables": ids, "join_dataframes": false, "start": start, "limit": 0})
	if len(res) != len(ids) {
		t.Fatalf("%d frames for %d variables: %d %s", len(res), len(ids), r.status, r.body)
	}
	for i, id := range ids {
		want := e.retained(id)
		frame := res[i].([]any)
		if len(frame) != len(want) {
			t.Errorf("variable %s: raw series has %d rows, the oracle %d retained points", id, len(frame), len(want))
			continue
		}
		for k, row := range frame {
			r := row.([]any)
			if r[0] != want[k].Value || r[1] != float64(want[k].TimestampMs) {
				t.Errorf("variable %s row %d: raw series [%v %v], oracle [%v %d]", id, k, r[0], r[1], want[k].Value, want[k].TimestampMs)
				break
			}
		}
	}
}

func TestWriterWithoutAheadMaxStaysBehindNow(t *testing.T) {
	e := newEnv(t, Options{Devices: 2, Variables: 2, Points: 100, Now: time.Now})
	w, err := e.sim.StartWriter(WriterOptions{Seed: 1, Interval: 2 * time.Millisecond, NewPerStep: 4, LatePerStep: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitStats(t, w, func(s WriterStats) bool { return s.New >= 40 })
	st := w.Stop()
	if st.Ahead != 0 {
		t.Errorf("AheadMax 0: %d ahead points", st.Ahead)
	}
	now := time.Now().UnixMilli()
	for _, id := range e.variableIDs() {
		if n := newestOf(e.sim.Points(id)); n > now+1000 {
			t.Errorf("variable %s: a point at %d, more than 1 s ahead of now %d", id, n, now)
		}
	}
}

func TestWriterWritesOnlyToTheVariablesGiven(t *testing.T) {
	e := newEnv(t, Options{})
	ids := e.variableIDs()
	counts := map[string]int{}
	for _, id := range ids {
		counts[id] = e.sim.PointCount(id)
	}
	target, doomed := ids[1], ids[2]
	w, err := e.sim.StartWriter(WriterOptions{Interval: time.Millisecond, NewPerStep: 2, LatePerStep: 2, Variables: []string{target, doomed, target}})
	if err != nil {
		t.Fatal(err)
	}
	waitStats(t, w, func(s WriterStats) bool { return s.New >= 10 })
	// A variable deleted under a running writer is skipped from then on.
	if err := e.sim.DeleteVariable(doomed); err != nil {
		t.Fatal(err)
	}
	n := w.Stats().New
	waitStats(t, w, func(s WriterStats) bool { return s.New >= n+10 })
	st := w.Stop()
	for _, id := range ids {
		got := e.sim.PointCount(id)
		switch id {
		case target:
			if got <= counts[id] {
				t.Errorf("target variable %s: %d points, had %d", id, got, counts[id])
			}
		case doomed:
			if got != -1 {
				t.Errorf("deleted variable %s: PointCount %d, want -1", id, got)
			}
		default:
			if got != counts[id] {
				t.Errorf("variable %s outside Variables: %d points, had %d (%+v)", id, got, counts[id], st)
			}
		}
	}

	if _, err := e.sim.StartWriter(WriterOptions{Variables: []string{"nope"}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a writer on an unknown variable: %v, want ErrNotFound", err)
	}
	for _, o := range []WriterOptions{{NewPerStep: -1}, {Interval: -1}, {ReportOnce: 1.5}, {ReportOnce: math.NaN()}, {LateMaxAge: -time.Second}} {
		if _, err := e.sim.StartWriter(o); err == nil {
			t.Errorf("StartWriter(%+v) gave no error", o)
		}
	}
}

func TestCloseStopsRunningWriters(t *testing.T) {
	s, err := New(Options{Seed: 1, Devices: 1, Variables: 1, Points: 10})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.StartWriter(WriterOptions{Interval: time.Millisecond, NewPerStep: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	select {
	case <-w.done:
	default:
		t.Fatal("the writer still runs after Close")
	}
	w.Stop()
}

func TestStopReturnsAfterTheLastStepIsWritten(t *testing.T) {
	e := newEnv(t, Options{Devices: 1, Variables: 2, Points: 50})
	ids := e.variableIDs()
	total := func() int {
		n := 0
		for _, id := range ids {
			n += e.sim.PointCount(id)
		}
		return n
	}
	before := total()
	// Big steps back to back, so that Stop nearly always meets one
	// under way.
	w, err := e.sim.StartWriter(WriterOptions{Interval: time.Millisecond, NewPerStep: 3000})
	if err != nil {
		t.Fatal(err)
	}
	waitStats(t, w, func(s WriterStats) bool { return s.New >= 4*3000 })
	st := w.Stop()
	if got := total() - before; got != st.New {
		t.Fatalf("Stop reported %d new points, the oracle holds %d more: a step was still being written", st.New, got)
	}
	if again := w.Stats(); again != st {
		t.Fatalf("stats moved after Stop: %+v, then %+v", st, again)
	}
}
