package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// retryErr is a retryable failure: a connection reset, a response cut
// mid-stream.
type retryErr struct{}

func (retryErr) Error() string   { return "connection reset" }
func (retryErr) Retryable() bool { return true }

// permanentErr is a failure no retry mends.
type permanentErr struct{}

func (permanentErr) Error() string   { return "code 60: table does not exist" }
func (permanentErr) Retryable() bool { return false }

func targetIDs(targets []pipeline.Target) []string {
	var ids []string
	for _, tg := range targets {
		ids = append(ids, tg.Variable.ID)
	}
	return ids
}

// lastTs is the timestamp of the newest of pts.
func lastTs(pts []pipeline.Point) int64 { return pts[len(pts)-1].TsMs }

func TestEngineReReadsFramesCutByLimitInAnyOrder(t *testing.T) {
	src, targets := pipelinetest.Fixture(7, 1000, 1_700_000_000_000)
	w := &pipelinetest.Writer{}
	st := &pipelinetest.Store{}
	e := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 64, VariablesPerRequest: 3, MaxInFlight: 3, BatchRows: 500, InsertWorkers: 2}, nil, nil, nil)
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
	pipelinetest.CheckLoaded(t, src, w, ids)
	for _, id := range ids {
		pts := src.Points(id)
		if got, want := st.Marks()[id].HwmMs, lastTs(pts); got != want {
			t.Errorf("mark of %s = %d, want the greatest loaded timestamp %d", id, got, want)
		}
	}
	if got := res.Points - res.Reloaded; got != 7000 {
		t.Errorf("reported %d points loaded of which %d re-loaded: %d distinct, want 7000", res.Points, res.Reloaded, got)
	}
}

func TestEngineRetriesRequestCutMidStream(t *testing.T) {
	src, targets := pipelinetest.Fixture(2, 10, 1_700_000_000_000)
	// The first response is cut mid-stream, after part of it reached the
	// sink.
	var once sync.Once
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
		cut := false
		once.Do(func() { cut = true })
		if cut {
			_ = sink.Point(0, src.Points(req.VariableIDs[0])[0])
			return retryErr{}
		}
		return serve(sink)
	}
	w := &pipelinetest.Writer{}
	st := &pipelinetest.Store{}
	e := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{VariablesPerRequest: 10, RetryWait: time.Millisecond}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 || src.Requests() != 2 {
		t.Fatalf("failed=%v requests=%d, want no failure after 2 requests", res.Failed, src.Requests())
	}
	pipelinetest.CheckLoaded(t, src, w, []string{"v000", "v001"})
}

func TestEngineFailedWriteKeepsMarks(t *testing.T) {
	src, targets := pipelinetest.Fixture(3, 10, 1_700_000_000_000)
	w := &pipelinetest.Writer{OnCommit: func([]pipeline.Row) error { return errors.New("clickhouse down") }}
	st := pipelinetest.NewStore(pipeline.Mark{VariableID: "v000", HwmMs: 5})
	res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 3 {
		t.Fatalf("%d failed targets, want 3", len(res.Failed))
	}
	if len(st.Marks()) != 1 || st.Marks()["v000"].HwmMs != 5 {
		t.Fatalf("marks moved after a failed write: %+v", st.Marks())
	}
}

func TestEngineMovesFloorOnRetentionRejection(t *testing.T) {
	src, targets := pipelinetest.Fixture(4, 100, 1_700_000_000_000)
	// The account keeps less than configured: the first 30 s are out of reach.
	src.Floor = 1_700_000_030_000
	w := &pipelinetest.Writer{}
	st := &pipelinetest.Store{}
	e := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{Floor: 1_700_000_000_000, VariablesPerRequest: 2}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 || res.FloorMovedTo <= src.Floor {
		t.Fatalf("failed=%v floor=%d, want success with the floor past %d", res.Failed, res.FloorMovedTo, src.Floor)
	}
	// Every point at or after the floor reached must be loaded.
	for _, id := range src.IDs() {
		for _, p := range src.Points(id) {
			if _, ok := w.Row(id, p.TsMs); p.TsMs >= res.FloorMovedTo && !ok {
				t.Fatalf("%s: point %d after the moved floor %d was not loaded", id, p.TsMs, res.FloorMovedTo)
			}
		}
	}
	if src.Requests() > 20 {
		t.Fatalf("%d requests: the floor should move in growing steps", src.Requests())
	}
}

func TestEngineCancelledRunCommitsOnlyCompleted(t *testing.T) {
	src, targets := pipelinetest.Fixture(20, 50, 1_700_000_000_000)
	w := &pipelinetest.Writer{}
	st := &pipelinetest.Store{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{VariablesPerRequest: 1}, nil, nil, nil).Run(ctx, targets)
	if len(res.Failed) != 20 || len(st.Marks()) != 0 {
		t.Fatalf("failed=%d marks=%d after a cancelled run, want 20 failed and no mark", len(res.Failed), len(st.Marks()))
	}
}

func TestPlanWindows(t *testing.T) {
	const hour = int64(time.Hour / time.Millisecond)
	// The end is half past an hour: the variables' phases of the hour
	// (one slot: on the hour) came round half an hour before it, before
	// the re-reads the marks record.
	floor, end := int64(1000*hour), int64(2000*hour+hour/2)
	vars := []pipeline.Variable{{ID: "new", LastActivityMs: 5}, {ID: "marked", LastActivityMs: 9}, {ID: "idle", LastActivityMs: 7}, {ID: "old", LastActivityMs: 8},
		{ID: "future", LastActivityMs: 1}, {ID: "empty"}, {ID: "active", LastActivityMs: 9}}
	marks := map[string]pipeline.Mark{
		"marked": {HwmMs: 1500 * hour, LastActivityMs: 3},
		"idle":   {HwmMs: 1500 * hour, LastActivityMs: 7, CheckedMs: end - 1, RecheckedMs: end - 1},
		"old":    {HwmMs: 10 * hour, LastActivityMs: 3},
		"future": {HwmMs: 3000 * hour},
		"empty":  {CheckedMs: end - 1, RecheckedMs: end - 1},
		// Re-read within its recheck period, and active since: its new
		// points alone.
		"active": {HwmMs: 1900 * hour, LastActivityMs: 3, CheckedMs: end - 1, RecheckedMs: end - 1},
	}
	got, skipped := pipeline.Plan(vars, marks, pipeline.PlanOptions{Lookback: time.Hour, Floor: floor, End: end, SkipIdle: true, IdleRecheck: time.Hour})
	want := map[string]int64{"new": floor, "marked": 1499 * hour, "old": floor, "future": end - hour, "active": 1900*hour + 1}
	if skipped != 2 || len(got) != len(want) {
		t.Fatalf("skipped %d, planned %d, want 2 and %d", skipped, len(got), len(want))
	}
	for _, tg := range got {
		if tg.Start != want[tg.Variable.ID] || tg.End != end {
			t.Errorf("%s: window %d..%d, want %d..%d", tg.Variable.ID, tg.Start, tg.End, want[tg.Variable.ID], end)
		}
		if tg.Tail != (tg.Variable.ID == "active") {
			t.Errorf("%s: Tail %v", tg.Variable.ID, tg.Tail)
		}
	}
}

func TestPlanNeverSkipsWhenTheServiceReportsNoActivity(t *testing.T) {
	vars := []pipeline.Variable{{ID: "a"}, {ID: "b"}}
	marks := map[string]pipeline.Mark{"a": {HwmMs: 10}, "b": {HwmMs: 10}}
	got, skipped := pipeline.Plan(vars, marks, pipeline.PlanOptions{Floor: 1, End: 100, SkipIdle: true})
	if skipped != 0 || len(got) != 2 {
		t.Fatalf("skipped %d of 2 variables although the service reports no lastActivity", skipped)
	}
}

func TestShardsPartitionVariables(t *testing.T) {
	seen := map[string]int{}
	for i := range 3 {
		for v := range 300 {
			if (pipeline.Shard{Index: i, Count: 3}).Holds(fmt.Sprint("var", v)) {
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
	vars := []pipeline.Variable{
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
	marks := map[string]pipeline.Mark{
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
	got := pipeline.Lag(vars, marks, floor, now)
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

func TestEngineLeavesRetriesBeforeTheResponseToTheSource(t *testing.T) {
	src, targets := pipelinetest.Fixture(2, 5, 1_700_000_000_000)
	// Every request fails before any of its response arrives, as a source
	// does once its own retry budget is spent.
	src.OnSeries = func(pipeline.SeriesRequest, pipeline.FrameSink, func(pipeline.FrameSink) error) error {
		return retryErr{}
	}
	st := &pipelinetest.Store{}
	res := pipeline.NewEngine(src, &pipelinetest.Writer{}, st, pipeline.EngineOptions{VariablesPerRequest: 10, RetryWait: time.Millisecond}, nil, nil, nil).Run(context.Background(), targets)
	if src.Requests() != 1 || len(res.Failed) != 2 || len(st.Marks()) != 0 {
		t.Fatalf("calls=%d failed=%d marks=%d; want 1 call (the source spent its budget), 2 failed, no mark", src.Requests(), len(res.Failed), len(st.Marks()))
	}
}

func TestEngineStreamsChunksIntoInsertsOfBatchRows(t *testing.T) {
	src, targets := pipelinetest.Fixture(40, 2000, 1_700_000_000_000)
	w := &pipelinetest.Writer{}
	st := &pipelinetest.Store{}
	e := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 5000, VariablesPerRequest: 5, MaxInFlight: 2, BatchRows: 40000, InsertWorkers: 1, BatchAge: time.Hour}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed targets: %v", res.Failed)
	}
	pipelinetest.CheckLoaded(t, src, w, targetIDs(targets))
	// 80,000 points in chunks of at most 32k rows, INSERTs of 40,000 rows:
	// several chunks per INSERT, and few INSERTs.
	if w.Appends() <= w.Commits() || w.Commits() > 3 {
		t.Fatalf("%d chunks streamed into %d INSERTs; want several chunks per INSERT and at most 3 INSERTs of 40000 rows", w.Appends(), w.Commits())
	}
	if res.Points != 80000 {
		t.Fatalf("run reports %d points, want 80000", res.Points)
	}
	for _, id := range targetIDs(targets) {
		pts := src.Points(id)
		if got, want := st.Marks()[id].HwmMs, lastTs(pts); got != want {
			t.Errorf("mark of %s = %d, want %d", id, got, want)
		}
	}
}

func TestEngineReadsAgainTheVariablesOfAStreamedInsertThatFailedRetryably(t *testing.T) {
	src, targets := pipelinetest.Fixture(9, 300, 1_700_000_000_000)
	// The first INSERT's commit fails retryably, storing nothing.
	var once sync.Once
	w := &pipelinetest.Writer{OnCommit: func([]pipeline.Row) error {
		var err error
		once.Do(func() { err = retryErr{} })
		return err
	}}
	st := &pipelinetest.Store{}
	e := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 3, MaxInFlight: 2, BatchRows: 600, InsertWorkers: 1}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed targets after a retryable INSERT failure: %v", res.Failed)
	}
	pipelinetest.CheckLoaded(t, src, w, targetIDs(targets))
	if res.Targets != 9 || res.Completed != 9 {
		t.Fatalf("targets %d completed %d, want 9 and 9", res.Targets, res.Completed)
	}
	for _, id := range targetIDs(targets) {
		pts := src.Points(id)
		if got, want := st.Marks()[id].HwmMs, lastTs(pts); got != want {
			t.Errorf("mark of %s = %d, want %d", id, got, want)
		}
	}
}

func TestEngineFailsTheVariablesOfAStreamedInsertThatFailedPermanently(t *testing.T) {
	src, targets := pipelinetest.Fixture(6, 300, 1_700_000_000_000)
	w := &pipelinetest.Writer{OnCommit: func([]pipeline.Row) error { return permanentErr{} }}
	st := &pipelinetest.Store{}
	e := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 3, MaxInFlight: 2, BatchRows: 100000, InsertWorkers: 1}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 6 {
		t.Fatalf("%d failed targets, want all 6: %v", len(res.Failed), res.Failed)
	}
	var le *pipeline.LoadError
	if !errors.As(res.Failed[0], &le) || !errors.As(res.Failed[0], new(permanentErr)) {
		t.Fatalf("failure %v is not a LoadError wrapping the writer's error", res.Failed[0])
	}
	if w.Begins() != w.Commits() || w.Commits() > 1 {
		t.Fatalf("%d INSERTs begun, %d committed: a permanent failure must not be read again", w.Begins(), w.Commits())
	}
	if len(st.Marks()) != 0 {
		t.Fatalf("marks committed although nothing was loaded: %v", st.Marks())
	}
}

func TestEngineStopsBeginningInsertsOnceTheWriterGaveUp(t *testing.T) {
	src, targets := pipelinetest.Fixture(20, 100, 1_700_000_000_000)
	gaveUp := errors.New("gave up after 7 attempts: connection refused")
	w := &pipelinetest.Writer{OnBegin: func() error { return gaveUp }}
	st := &pipelinetest.Store{}
	e := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 1000, VariablesPerRequest: 1, MaxInFlight: 1, BatchRows: 10, BatchAge: time.Millisecond, InsertWorkers: 1}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 20 || len(st.Marks()) != 0 {
		t.Fatalf("%d failed, %d marks; want every target failed and no mark", len(res.Failed), len(st.Marks()))
	}
	if !errors.Is(res.Failed[0], gaveUp) {
		t.Fatalf("failure %v does not carry the writer's error", res.Failed[0])
	}
	if w.Begins() != 1 {
		t.Fatalf("Begin called %d times; once it gave up, the run's other chunks must fail at once", w.Begins())
	}
}
