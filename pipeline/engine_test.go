package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// memSource serves series from memory with the service's limit rule, and
// returns the rows of a cut frame in a random order: the spec does not say
// which rows a cut frame keeps.
type memSource struct {
	mu       sync.Mutex
	points   map[string][]Point
	floor    int64 // the service's real retention floor
	failOnce map[string]error
	requests int
	rng      *rand.Rand
}

type retryErr struct{}

func (retryErr) Error() string   { return "connection reset" }
func (retryErr) Retryable() bool { return true }

type retentionErr struct{}

func (retentionErr) Error() string           { return "403003 retention" }
func (retentionErr) RetentionExceeded() bool { return true }

// Walk lists nothing: engine tests give the engine its targets.
func (s *memSource) Walk(context.Context, Scope, WalkSink) error { return nil }

func (s *memSource) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	s.mu.Lock()
	s.requests++
	if req.Start < s.floor {
		s.mu.Unlock()
		return retentionErr{}
	}
	key := fmt.Sprint(req.VariableIDs, req.Start, req.End)
	if err := s.failOnce[key]; err != nil {
		delete(s.failOnce, key)
		// Deliver part of the response first, as a body cut mid-stream does.
		if pts := s.points[req.VariableIDs[0]]; len(pts) > 0 {
			_ = sink.Point(0, pts[0])
		}
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	for i, id := range req.VariableIDs {
		in := inWindow(s.points[id], req.Start, req.End)
		if req.Limit > 0 && len(in) > req.Limit {
			s.mu.Lock()
			s.rng.Shuffle(len(in), func(a, b int) { in[a], in[b] = in[b], in[a] })
			s.mu.Unlock()
			in = in[:req.Limit]
		}
		if err := serveFrame(sink, i, in); err != nil {
			return err
		}
	}
	return nil
}

// inWindow is a copy of the points in [start, end].
func inWindow(points []Point, start, end int64) []Point {
	var in []Point
	for _, p := range points {
		if p.TsMs >= start && p.TsMs <= end {
			in = append(in, p)
		}
	}
	return in
}

// serveFrame hands one frame to the sink.
func serveFrame(sink FrameSink, i int, in []Point) error {
	for _, p := range in {
		if err := sink.Point(i, p); err != nil {
			return err
		}
	}
	return sink.EndFrame(i, len(in))
}

type memWriter struct {
	mu     sync.Mutex
	rows   map[string]map[int64]Row
	writes int
	fail   error
}

// Begin opens an INSERT whose rows reach the writer when it commits, the
// way ClickHouse acknowledges them.
func (w *memWriter) Begin(ctx context.Context) (Insert, error) {
	return (&streamWriter{memWriter: w}).Begin(ctx)
}

func (w *memWriter) Write(_ context.Context, chunks []*Batch) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return w.fail
	}
	w.writes++
	for _, c := range chunks {
		for i := range c.Len() {
			if w.rows[c.VariableID[i]] == nil {
				w.rows[c.VariableID[i]] = map[int64]Row{}
			}
			w.rows[c.VariableID[i]][c.TsMs[i]] = Row{VariableID: c.VariableID[i], TsMs: c.TsMs[i], Value: c.Value[i], Context: c.Context[i],
				Lat: c.Lat[i], HasLat: c.HasLat[i], Lng: c.Lng[i], HasLng: c.HasLng[i], DeviceLabel: c.DeviceLabel[i]}
		}
	}
	return nil
}

type memStore struct {
	mu    sync.Mutex
	marks map[string]Mark
}

func (s *memStore) Load(context.Context) (map[string]Mark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Mark, len(s.marks))
	for k, v := range s.marks {
		out[k] = v
	}
	return out, nil
}

func (s *memStore) MarksOf(ctx context.Context, ids []string, fn func(Mark) error) error {
	marks, _ := s.Load(ctx)
	return MarksOfMap(marks, ids, fn)
}

func (s *memStore) Commit(_ context.Context, marks []Mark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range marks {
		if old, ok := s.marks[m.VariableID]; ok && old.HwmMs > m.HwmMs {
			m.HwmMs = old.HwmMs
		}
		s.marks[m.VariableID] = m
	}
	return nil
}

func fixture(nVars, nPoints int, start int64) (*memSource, []Target) {
	src := &memSource{points: map[string][]Point{}, failOnce: map[string]error{}, rng: rand.New(rand.NewPCG(1, 2))}
	var targets []Target
	for v := range nVars {
		id := fmt.Sprintf("v%03d", v)
		for p := range nPoints {
			pt := Point{TsMs: start + int64(p)*1000 + int64(v), Value: float64(p), Context: []byte("{}")}
			if v%2 == 1 {
				// The source reads the position (extract/fleet for the API).
				pt.Context = []byte(fmt.Sprintf(`{"lat":%d.5,"lng":-%d.25}`, p, v))
				pt.Lat, pt.Lng, pt.HasLat, pt.HasLng = float64(p)+0.5, -float64(v)-0.25, true, true
			}
			src.points[id] = append(src.points[id], pt)
		}
		targets = append(targets, Target{Variable: Variable{ID: id, Label: "var" + id, DeviceID: "d1", DeviceLabel: "dev"}, Start: start, End: start + int64(nPoints)*1000 + 1000, From: start})
	}
	return src, targets
}

func checkLoaded(t *testing.T, src *memSource, w *memWriter, ids []string) {
	t.Helper()
	for _, id := range ids {
		want := src.points[id]
		got := w.rows[id]
		if len(got) != len(want) {
			t.Errorf("variable %s: loaded %d distinct points, source has %d", id, len(got), len(want))
			continue
		}
		for _, p := range want {
			r, ok := got[p.TsMs]
			if !ok || (r.Value != p.Value && !(math.IsNaN(r.Value) && math.IsNaN(p.Value))) || r.Context != string(p.Context) {
				t.Errorf("variable %s ts %d: got %+v (present %v), want value %v context %s", id, p.TsMs, r, ok, p.Value, p.Context)
				return
			}
			lat, lng, hasLat, hasLng := p.Lat, p.Lng, p.HasLat, p.HasLng
			if r.HasLat != hasLat || r.HasLng != hasLng || r.Lat != lat || r.Lng != lng {
				t.Errorf("variable %s ts %d: lat/lng %v/%v %v/%v, want %v/%v %v/%v", id, p.TsMs, r.Lat, r.HasLat, r.Lng, r.HasLng, lat, hasLat, lng, hasLng)
				return
			}
		}
	}
}

func TestEngineReReadsFramesCutByLimitInAnyOrder(t *testing.T) {
	src, targets := fixture(7, 1000, 1_700_000_000_000)
	w := &memWriter{rows: map[string]map[int64]Row{}}
	st := &memStore{marks: map[string]Mark{}}
	e := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 64, VariablesPerRequest: 3, MaxInFlight: 3, BatchRows: 500, InsertWorkers: 2}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed targets: %v", res.Failed)
	}
	if res.Splits == 0 {
		t.Fatalf("no frame was split with a limit of 64 over 1000 points")
	}
	var ids []string
	for _, tg := range targets {
		ids = append(ids, tg.Variable.ID)
	}
	checkLoaded(t, src, w, ids)
	for _, id := range ids {
		pts := src.points[id]
		if got, want := st.marks[id].HwmMs, pts[len(pts)-1].TsMs; got != want {
			t.Errorf("mark of %s = %d, want the greatest loaded timestamp %d", id, got, want)
		}
	}
	if got := res.Points - res.Reloaded; got != 7000 {
		t.Errorf("reported %d points loaded of which %d re-loaded: %d distinct, want 7000", res.Points, res.Reloaded, got)
	}
}

func TestEngineRetriesRequestCutMidStream(t *testing.T) {
	src, targets := fixture(2, 10, 1_700_000_000_000)
	src.failOnce[fmt.Sprint([]string{"v000", "v001"}, targets[0].Start, targets[0].End)] = retryErr{}
	w := &memWriter{rows: map[string]map[int64]Row{}}
	st := &memStore{marks: map[string]Mark{}}
	e := NewEngine(src, w, st, EngineOptions{VariablesPerRequest: 10, RetryWait: time.Millisecond}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 || src.requests != 2 {
		t.Fatalf("failed=%v requests=%d, want no failure after 2 requests", res.Failed, src.requests)
	}
	checkLoaded(t, src, w, []string{"v000", "v001"})
}

func TestEngineFailedWriteKeepsMarks(t *testing.T) {
	src, targets := fixture(3, 10, 1_700_000_000_000)
	w := &memWriter{rows: map[string]map[int64]Row{}, fail: errors.New("clickhouse down")}
	st := &memStore{marks: map[string]Mark{"v000": {VariableID: "v000", HwmMs: 5}}}
	res := NewEngine(src, w, st, EngineOptions{}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 3 {
		t.Fatalf("%d failed targets, want 3", len(res.Failed))
	}
	if len(st.marks) != 1 || st.marks["v000"].HwmMs != 5 {
		t.Fatalf("marks moved after a failed write: %+v", st.marks)
	}
}

func TestEngineMovesFloorOnRetentionRejection(t *testing.T) {
	src, targets := fixture(4, 100, 1_700_000_000_000)
	// The account keeps less than configured: the first 30 s are out of reach.
	src.floor = 1_700_000_030_000
	w := &memWriter{rows: map[string]map[int64]Row{}}
	st := &memStore{marks: map[string]Mark{}}
	e := NewEngine(src, w, st, EngineOptions{Floor: 1_700_000_000_000, VariablesPerRequest: 2}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 || res.FloorMovedTo <= src.floor {
		t.Fatalf("failed=%v floor=%d, want success with the floor past %d", res.Failed, res.FloorMovedTo, src.floor)
	}
	// Every point at or after the floor reached must be loaded.
	for id, pts := range src.points {
		for _, p := range pts {
			if _, ok := w.rows[id][p.TsMs]; p.TsMs >= res.FloorMovedTo && !ok {
				t.Fatalf("%s: point %d after the moved floor %d was not loaded", id, p.TsMs, res.FloorMovedTo)
			}
		}
	}
	if src.requests > 20 {
		t.Fatalf("%d requests: the floor should move in growing steps", src.requests)
	}
}

func TestEngineCancelledRunCommitsOnlyCompleted(t *testing.T) {
	src, targets := fixture(20, 50, 1_700_000_000_000)
	w := &memWriter{rows: map[string]map[int64]Row{}}
	st := &memStore{marks: map[string]Mark{}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := NewEngine(src, w, st, EngineOptions{VariablesPerRequest: 1}, nil, nil, nil).Run(ctx, targets)
	if len(res.Failed) != 20 || len(st.marks) != 0 {
		t.Fatalf("failed=%d marks=%d after a cancelled run, want 20 failed and no mark", len(res.Failed), len(st.marks))
	}
}

func TestPlanWindows(t *testing.T) {
	const hour = int64(time.Hour / time.Millisecond)
	floor, end := int64(1000*hour), int64(2000*hour)
	vars := []Variable{{ID: "new", LastActivityMs: 5}, {ID: "marked", LastActivityMs: 9}, {ID: "idle", LastActivityMs: 7}, {ID: "old", LastActivityMs: 8}, {ID: "future", LastActivityMs: 1}, {ID: "empty"}}
	marks := map[string]Mark{
		"marked": {HwmMs: 1500 * hour, LastActivityMs: 3},
		"idle":   {HwmMs: 1500 * hour, LastActivityMs: 7, CheckedMs: end - 1},
		"old":    {HwmMs: 10 * hour, LastActivityMs: 3},
		"future": {HwmMs: 3000 * hour},
		"empty":  {CheckedMs: end - 1},
	}
	got, skipped := Plan(vars, marks, PlanOptions{Lookback: time.Hour, Floor: floor, End: end, SkipIdle: true, IdleRecheck: time.Hour})
	want := map[string]int64{"new": floor, "marked": 1499 * hour, "old": floor, "future": end - hour}
	if skipped != 2 || len(got) != len(want) {
		t.Fatalf("skipped %d, planned %d, want 2 and %d", skipped, len(got), len(want))
	}
	for _, tg := range got {
		if tg.Start != want[tg.Variable.ID] || tg.End != end {
			t.Errorf("%s: window %d..%d, want %d..%d", tg.Variable.ID, tg.Start, tg.End, want[tg.Variable.ID], end)
		}
	}
}

// Requests follow window starts, a start far below a target's own never
// shared with it, and among equal starts (a backfill's) the order of
// variable ids, datapoints' sorting key: the rollup's check of
// a commit's variables then reads adjacent keys.
func TestGroupOrdersEqualStartsByVariableID(t *testing.T) {
	var targets []*targetState
	for i, id := range []string{"m", "c", "x", "a", "q", "b", "late"} {
		start := int64(100)
		if id == "late" {
			start = 100 - 10*3_600_000 // far below the others' slack
		}
		targets = append(targets, &targetState{Target: Target{Variable: Variable{ID: id}}, start: start, end: 200 + int64(i)})
	}
	var got []string
	for _, r := range Group(targets, 3) {
		var ids []string
		for _, tg := range r.targets {
			ids = append(ids, tg.Variable.ID)
		}
		got = append(got, strings.Join(ids, ","))
	}
	if want := []string{"late", "a,b,c", "m,q,x"}; !slices.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}

func TestPlanNeverSkipsWhenTheServiceReportsNoActivity(t *testing.T) {
	vars := []Variable{{ID: "a"}, {ID: "b"}}
	marks := map[string]Mark{"a": {HwmMs: 10}, "b": {HwmMs: 10}}
	got, skipped := Plan(vars, marks, PlanOptions{Floor: 1, End: 100, SkipIdle: true})
	if skipped != 0 || len(got) != 2 {
		t.Fatalf("skipped %d of 2 variables although the service reports no lastActivity", skipped)
	}
}

func TestShardsPartitionVariables(t *testing.T) {
	seen := map[string]int{}
	for i := range 3 {
		for v := range 300 {
			if (Shard{Index: i, Count: 3}).Holds(fmt.Sprint("var", v)) {
				seen[fmt.Sprint("var", v)]++
			}
		}
	}
	counts := []int{}
	for _, n := range seen {
		counts = append(counts, n)
	}
	sort.Ints(counts)
	if len(seen) != 300 || counts[0] != 1 || counts[len(counts)-1] != 1 {
		t.Fatalf("shards must cover each variable exactly once: %d covered, counts %v..%v", len(seen), counts[0], counts[len(counts)-1])
	}
}

func TestLag(t *testing.T) {
	const floor, now = 1000, 20_000
	vars := []Variable{
		{ID: "caught-up", LastActivityMs: 5000},
		{ID: "behind", LastActivityMs: 9000},
		{ID: "idle", LastActivityMs: 0},
		{ID: "never-read", LastActivityMs: 4000},
		{ID: "below-floor", LastActivityMs: 500},
		{ID: "read-long-ago", LastActivityMs: 7000},
		{ID: "future-due", LastActivityMs: 8000},
		{ID: "future-pending", LastActivityMs: 8000},
		{ID: "late-write", LastActivityMs: 6001},
	}
	marks := map[string]Mark{
		"caught-up":      {HwmMs: 4000, LastActivityMs: 5000, CheckedMs: 19_000},
		"behind":         {HwmMs: 6000, LastActivityMs: 7000},
		"idle":           {HwmMs: 100},
		"read-long-ago":  {HwmMs: 6990, LastActivityMs: 6000, CheckedMs: 2000},
		"future-due":     {HwmMs: 7000, LastActivityMs: 8000, CheckedMs: 19_000, FutureMs: 16_000},
		"future-pending": {HwmMs: 7000, LastActivityMs: 8000, CheckedMs: 19_000, FutureMs: 21_000},
		// lastActivity moved by a late point below the mark: a point is
		// known to be missing although lastActivity trails the mark.
		"late-write": {HwmMs: 9000, LastActivityMs: 6000, CheckedMs: 19_999},
	}
	got := Lag(vars, marks, floor, now)
	want := []struct {
		id  string
		lag time.Duration
	}{
		{"read-long-ago", 18 * time.Second}, {"future-due", 4 * time.Second}, {"behind", 3 * time.Second}, {"never-read", 3 * time.Second},
		{"late-write", time.Millisecond}, {"caught-up", 0}, {"idle", 0}, {"below-floor", 0}, {"future-pending", 0},
	}
	if len(got) != len(want) {
		t.Fatalf("%d lags for %d variables", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Variable.ID != w.id || got[i].Lag != w.lag {
			t.Fatalf("position %d: %s lag %s, want %s lag %s (all: %+v)", i, got[i].Variable.ID, got[i].Lag, w.id, w.lag, got)
		}
	}
}

// untouchedSource fails every request before any of its response arrives,
// as a source does once its own retry budget is spent.
type untouchedSource struct {
	memSource
	calls int
}

func (s *untouchedSource) Series(context.Context, SeriesRequest, FrameSink) error {
	s.calls++
	return retryErr{}
}

func TestEngineLeavesRetriesBeforeTheResponseToTheSource(t *testing.T) {
	_, targets := fixture(2, 5, 1_700_000_000_000)
	src := &untouchedSource{}
	st := &memStore{marks: map[string]Mark{}}
	res := NewEngine(src, &memWriter{rows: map[string]map[int64]Row{}}, st, EngineOptions{VariablesPerRequest: 10, RetryWait: time.Millisecond}, nil, nil, nil).Run(context.Background(), targets)
	if src.calls != 1 || len(res.Failed) != 2 || len(st.marks) != 0 {
		t.Fatalf("calls=%d failed=%d marks=%d; want 1 call (the source spent its budget), 2 failed, no mark", src.calls, len(res.Failed), len(st.marks))
	}
}

// streamWriter is a memWriter that also streams (StreamWriter): rows reach
// the memWriter only when their INSERT commits. failCommits makes that many
// commits fail with err after storing nothing; failBegin makes every Begin
// fail.
type streamWriter struct {
	*memWriter
	mu          sync.Mutex
	begins      int
	commits     int
	appends     int
	failCommits int
	err         error
	failBegin   error
}

type streamInsert struct {
	w    *streamWriter
	rows []*Batch
}

func (w *streamWriter) Begin(context.Context) (Insert, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.begins++
	if w.failBegin != nil {
		return nil, w.failBegin
	}
	return &streamInsert{w: w}, nil
}

func (in *streamInsert) Append(c *Batch) error {
	// Copy: the engine reuses the chunk as soon as Append returns.
	cp := new(Batch)
	for i := range c.Len() {
		cp.Append(Row{VariableID: c.VariableID[i], DeviceLabel: c.DeviceLabel[i], TsMs: c.TsMs[i], Value: c.Value[i], Context: c.Context[i],
			Lat: c.Lat[i], Lng: c.Lng[i], HasLat: c.HasLat[i], HasLng: c.HasLng[i]})
	}
	in.rows = append(in.rows, cp)
	in.w.mu.Lock()
	in.w.appends++
	in.w.mu.Unlock()
	return nil
}

func (in *streamInsert) Commit() error {
	in.w.mu.Lock()
	in.w.commits++
	if in.w.failCommits > 0 {
		in.w.failCommits--
		in.w.mu.Unlock()
		return in.w.err
	}
	in.w.mu.Unlock()
	return in.w.memWriter.Write(context.Background(), in.rows)
}

func (in *streamInsert) Abort() {}

type permanentErr struct{}

func (permanentErr) Error() string   { return "code 60: table does not exist" }
func (permanentErr) Retryable() bool { return false }

func targetIDs(targets []Target) []string {
	var ids []string
	for _, tg := range targets {
		ids = append(ids, tg.Variable.ID)
	}
	return ids
}

func TestEngineStreamsChunksIntoInsertsOfBatchRows(t *testing.T) {
	src, targets := fixture(40, 2000, 1_700_000_000_000)
	w := &streamWriter{memWriter: &memWriter{rows: map[string]map[int64]Row{}}}
	st := &memStore{marks: map[string]Mark{}}
	e := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 5000, VariablesPerRequest: 5, MaxInFlight: 2, BatchRows: 40000, InsertWorkers: 1, BatchAge: time.Hour}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed targets: %v", res.Failed)
	}
	checkLoaded(t, src, w.memWriter, targetIDs(targets))
	// 80,000 points in chunks of at most 32k rows, INSERTs of 40,000 rows:
	// several chunks per INSERT, and few INSERTs.
	if w.appends <= w.commits || w.commits > 3 {
		t.Fatalf("%d chunks streamed into %d INSERTs; want several chunks per INSERT and at most 3 INSERTs of 40000 rows", w.appends, w.commits)
	}
	if res.Points != 80000 {
		t.Fatalf("run reports %d points, want 80000", res.Points)
	}
	for _, id := range targetIDs(targets) {
		pts := src.points[id]
		if got, want := st.marks[id].HwmMs, pts[len(pts)-1].TsMs; got != want {
			t.Errorf("mark of %s = %d, want %d", id, got, want)
		}
	}
}

func TestEngineReadsAgainTheVariablesOfAStreamedInsertThatFailedRetryably(t *testing.T) {
	src, targets := fixture(9, 300, 1_700_000_000_000)
	w := &streamWriter{memWriter: &memWriter{rows: map[string]map[int64]Row{}}, failCommits: 1, err: retryErr{}}
	st := &memStore{marks: map[string]Mark{}}
	e := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 3, MaxInFlight: 2, BatchRows: 600, InsertWorkers: 1}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed targets after a retryable INSERT failure: %v", res.Failed)
	}
	checkLoaded(t, src, w.memWriter, targetIDs(targets))
	if res.Targets != 9 || res.Completed != 9 {
		t.Fatalf("targets %d completed %d, want 9 and 9", res.Targets, res.Completed)
	}
	for _, id := range targetIDs(targets) {
		pts := src.points[id]
		if got, want := st.marks[id].HwmMs, pts[len(pts)-1].TsMs; got != want {
			t.Errorf("mark of %s = %d, want %d", id, got, want)
		}
	}
}

func TestEngineFailsTheVariablesOfAStreamedInsertThatFailedPermanently(t *testing.T) {
	src, targets := fixture(6, 300, 1_700_000_000_000)
	w := &streamWriter{memWriter: &memWriter{rows: map[string]map[int64]Row{}}, failCommits: 1000, err: permanentErr{}}
	st := &memStore{marks: map[string]Mark{}}
	e := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 3, MaxInFlight: 2, BatchRows: 100000, InsertWorkers: 1}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 6 {
		t.Fatalf("%d failed targets, want all 6: %v", len(res.Failed), res.Failed)
	}
	var le *LoadError
	if !errors.As(res.Failed[0], &le) || !errors.As(res.Failed[0], new(permanentErr)) {
		t.Fatalf("failure %v is not a LoadError wrapping the writer's error", res.Failed[0])
	}
	if w.begins != w.commits || w.commits > 1 {
		t.Fatalf("%d INSERTs begun, %d committed: a permanent failure must not be read again", w.begins, w.commits)
	}
	if len(st.marks) != 0 {
		t.Fatalf("marks committed although nothing was loaded: %v", st.marks)
	}
}

func TestEngineStopsBeginningInsertsOnceTheWriterGaveUp(t *testing.T) {
	src, targets := fixture(20, 100, 1_700_000_000_000)
	w := &streamWriter{memWriter: &memWriter{rows: map[string]map[int64]Row{}}, failBegin: errors.New("gave up after 7 attempts: connection refused")}
	st := &memStore{marks: map[string]Mark{}}
	e := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 1, MaxInFlight: 1, BatchRows: 10, BatchAge: time.Millisecond, InsertWorkers: 1}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 20 || len(st.marks) != 0 {
		t.Fatalf("%d failed, %d marks; want every target failed and no mark", len(res.Failed), len(st.marks))
	}
	if !errors.Is(res.Failed[0], w.failBegin) {
		t.Fatalf("failure %v does not carry the writer's error", res.Failed[0])
	}
	if w.begins != 1 {
		t.Fatalf("Begin called %d times; once it gave up, the run's other chunks must fail at once", w.begins)
	}
}
