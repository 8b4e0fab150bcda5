package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"

	"github.com/prometheus/client_golang/prometheus"
)

// memLink is a link of the commit chain that records the targets it is
// handed by variable (the last of each), notes those whose mark st
// already held at that moment, and fails with fail instead of handing on.
type memLink struct {
	mu             sync.Mutex
	st             *pipelinetest.Store
	done           map[string]pipeline.Done
	markedTooEarly []string
	fail           error
}

func newMemLink(st *pipelinetest.Store) *memLink {
	return &memLink{st: st, done: map[string]pipeline.Done{}}
}

func (l *memLink) link() pipeline.Link {
	return pipeline.Link{Stage: "test", Wrap: func(next pipeline.Committer) pipeline.Committer {
		return pipeline.CommitFunc(func(ctx context.Context, done []pipeline.Done, final bool) error {
			l.mu.Lock()
			marks := l.st.Marks()
			for _, d := range done {
				if _, ok := marks[d.Variable.ID]; ok {
					l.markedTooEarly = append(l.markedTooEarly, d.Variable.ID)
				}
				l.done[d.Variable.ID] = d
			}
			fail := l.fail
			l.mu.Unlock()
			if fail != nil {
				return fail
			}
			return next.Commit(ctx, done, final)
		})
	}}
}

// covers says the range the analyst tables are handed for d
// (analyst.RangeOf) holds ts.
func covers(d pipeline.Done, ts int64) bool {
	r, ok := analyst.RangeOf(d)
	return ok && ts >= r.FromMs && ts <= r.ToMs
}

func TestEngineHandsTheChainWhatEachTargetLoadedBeforeCommittingItsMark(t *testing.T) {
	src, targets := pipelinetest.Fixture(9, 700, 1_700_000_000_000)
	w := &pipelinetest.Writer{}
	st := &pipelinetest.Store{}
	ru := newMemLink(st)
	// Frames cut by the limit and small inserts: many spans per variable.
	e := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 128, VariablesPerRequest: 4, BatchRows: 300, Links: []pipeline.Link{ru.link()}}, nil, nil, nil)
	res := e.Run(context.Background(), targets)
	if len(res.Failed) != 0 || res.CommitErr != nil {
		t.Fatalf("failed=%v commit=%v", res.Failed, res.CommitErr)
	}
	if len(ru.markedTooEarly) > 0 {
		t.Errorf("marks of %v were committed before the link was handed their targets", ru.markedTooEarly)
	}
	for _, tg := range targets {
		pts := src.Points(tg.Variable.ID)
		d := ru.done[tg.Variable.ID]
		// Points counts the rows of cut frames read again twice.
		if d.From != tg.From || d.Points < int64(len(pts)) || d.MinTs != pts[0].TsMs || d.MaxTs != pts[len(pts)-1].TsMs || d.Err != nil {
			t.Errorf("handed %s from %d, %d points over [%d, %d], err %v; want from %d, at least %d points over [%d, %d]",
				tg.Variable.ID, d.From, d.Points, d.MinTs, d.MaxTs, d.Err, tg.From, len(pts), pts[0].TsMs, pts[len(pts)-1].TsMs)
		}
		if _, ok := st.Marks()[tg.Variable.ID]; !ok {
			t.Errorf("no mark committed for %s", tg.Variable.ID)
		}
	}
}

// An INSERT that fails may have stored its rows all the same (the server
// wrote its blocks, then the connection reset): the chain is handed them
// as sent, since no later read is bound to load them again (the
// retention floor, or another process's mark, may pass them first), and
// the analyst tables must reflect every row the warehouse holds (found by
// the simulation, seed 125297588502).
func TestEngineHandsTheChainTheRowsOfAFailedInsert(t *testing.T) {
	src, targets := pipelinetest.Fixture(3, 50, 1_700_000_000_000)
	var mu sync.Mutex
	landed := map[string][]int64{}
	w := &pipelinetest.Writer{OnCommit: func(rows []pipeline.Row) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rows {
			landed[r.VariableID] = append(landed[r.VariableID], r.TsMs)
		}
		return errors.New("read tcp: connection reset by peer (after the server wrote the blocks)")
	}}
	st := &pipelinetest.Store{}
	ru := newMemLink(st)
	res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{BatchRows: 40, Links: []pipeline.Link{ru.link()}}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != len(targets) || len(st.Marks()) != 0 {
		t.Fatalf("%d of %d targets failed, marks %v; want all failed, none", len(res.Failed), len(targets), st.Marks())
	}
	for _, tg := range targets {
		id := tg.Variable.ID
		d, ok := ru.done[id]
		if !ok || d.Points != 0 || d.Err == nil {
			t.Errorf("%s handed %v with %d points acknowledged, err %v; want handed, none, failed", id, ok, d.Points, d.Err)
		}
		if len(landed[id]) == 0 {
			t.Fatalf("no row of %s reached the writer", id)
		}
		for _, ts := range landed[id] {
			if !covers(d, ts) {
				t.Errorf("%s: the failed INSERT's row at %d is not in the range handed on (from %d, start %d, %d sent over [%d, %d])",
					id, ts, d.From, d.Start, d.Sent, d.SentMinTs, d.SentMaxTs)
				break
			}
		}
	}
}

// load/clickhouse's Append flushes each chunk to the server as a block,
// which ClickHouse writes as it arrives: when a later Append of the same
// INSERT fails and the loader aborts it, the blocks of the chunks before
// may be stored all the same. Their spans are acknowledged as failed with
// the INSERT, so the range handed on covers them (the simulation's
// warehouse stores nothing on a failed Append, so this is the one check).
func TestEngineHandsTheChainTheRowsOfChunksFlushedBeforeAFailedAppend(t *testing.T) {
	// One variable of 70,000 points read in one request: the fetcher
	// hands the loader chunks of maxChunkRows (32,768) rows, all three
	// appended to one INSERT (BatchRows above the total).
	src, targets := pipelinetest.Fixture(1, 70_000, 1_700_000_000_000)
	var mu sync.Mutex
	var flushed []int64
	appends := 0
	w := &pipelinetest.Writer{OnAppend: func(c *pipeline.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if appends++; appends == 3 {
			return errors.New("write: broken pipe (the blocks before were stored)")
		}
		flushed = append(flushed, c.TsMs[:c.Len()]...)
		return nil
	}}
	st := &pipelinetest.Store{}
	ru := newMemLink(st)
	res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 100_000, MaxInFlight: 1, InsertWorkers: 1,
		BatchRows: 100_000, BatchAge: time.Hour, Links: []pipeline.Link{ru.link()}}, nil, nil, nil).Run(context.Background(), targets)
	if appends < 3 || len(flushed) == 0 {
		t.Fatalf("%d appends, %d rows flushed before the failed one; want a third append to fail after rows were flushed", appends, len(flushed))
	}
	if len(res.Failed) != 1 || len(st.Marks()) != 0 {
		t.Fatalf("%d failed, marks %v; want the target failed and no mark", len(res.Failed), st.Marks())
	}
	d, ok := ru.done[targets[0].Variable.ID]
	if !ok || d.Points != 0 || d.Err == nil {
		t.Fatalf("handed %v with %d points acknowledged, err %v; want handed, none, failed", ok, d.Points, d.Err)
	}
	for _, ts := range flushed {
		if !covers(d, ts) {
			t.Fatalf("the row at %d, flushed before the failed Append, is not in the range handed on (from %d, start %d, %d sent over [%d, %d])",
				ts, d.From, d.Start, d.Sent, d.SentMinTs, d.SentMaxTs)
		}
	}
}

// A run cancelled (SIGTERM) while requests of a target are still queued
// has loaded rows of it already: the target ends failed and is handed on
// like the others, so the analyst tables are recomputed over those rows
// (before, it was left out of the chain: its hours lacked the rows until a
// later read handed them on, and for good if another process's mark moved
// past them first). The queue's pop asks the context itself, so no
// request is handed out after the cancellation, whichever goroutine runs
// first.
func TestACancelledRunHandsTheChainTheTargetsItLeftQueued(t *testing.T) {
	src, targets := pipelinetest.Fixture(2, 300, 1_700_000_000_000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
		// The first response is served whole, its frame cut by the limit,
		// and the run is stopped as it ends: the re-reads of the rest of
		// v000's window and v001's request stay queued.
		err := serve(sink)
		cancel()
		return err
	}
	w := &pipelinetest.Writer{}
	st := &pipelinetest.Store{}
	ru := newMemLink(st)
	res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 1, MaxInFlight: 1,
		Links: []pipeline.Link{ru.link()}}, nil, nil, nil).Run(ctx, targets)
	if len(res.Failed) != 2 || len(st.Marks()) != 0 {
		t.Fatalf("%d targets failed, marks %v; want both failed (cancelled), none", len(res.Failed), st.Marks())
	}
	rows := w.Rows("v000")
	if len(rows) == 0 || len(rows) >= 300 {
		t.Fatalf("%d rows of v000 stored; want the cut frame's, some of 300", len(rows))
	}
	d, ok := ru.done["v000"]
	if !ok || d.Err == nil {
		t.Fatalf("v000 handed %v, err %v; want handed, failed", ok, d.Err)
	}
	for ts := range rows {
		if !covers(d, ts) {
			t.Errorf("v000's row at %d is stored, and the range handed on does not hold it (from %d, start %d, %d sent over [%d, %d])",
				ts, d.From, d.Start, d.Sent, d.SentMinTs, d.SentMaxTs)
			break
		}
	}
	if _, ok := ru.done["v001"]; !ok {
		t.Errorf("v001, never read, was not handed on")
	}
}

func TestEngineLeavesTheMarksWhenALinkFails(t *testing.T) {
	src, targets := pipelinetest.Fixture(3, 50, 1_700_000_000_000)
	w := &pipelinetest.Writer{}
	st := pipelinetest.NewStore(pipeline.Mark{VariableID: "v000", HwmMs: 5})
	boom := errors.New("clickhouse refused the recompute")
	ru := newMemLink(&pipelinetest.Store{})
	ru.fail = boom
	res := pipeline.NewEngine(src, w, st, pipeline.EngineOptions{Links: []pipeline.Link{ru.link()}}, nil, nil, nil).Run(context.Background(), targets)
	if !errors.Is(res.CommitErr, boom) {
		t.Errorf("CommitErr = %v, want the link's failure", res.CommitErr)
	}
	if len(st.Marks()) != 1 || st.Marks()["v000"].HwmMs != 5 {
		t.Errorf("marks moved although a link failed: %+v", st.Marks())
	}
	if len(ru.done) != 3 {
		t.Errorf("the link was handed %d variables, want 3", len(ru.done))
	}
	if len(res.Links) != 1 || !errors.Is(res.Links[0].Err, boom) || res.Links[0].Stage != "test" {
		t.Errorf("link times %+v, want the test link's, with its failure", res.Links)
	}
}

// A pass that loaded points from an older retention floor and stopped
// before its commit left them in the warehouse; once the floor has moved
// past them no pass reads them again. The chain is handed where the window
// would start without the floor (From), whether or not this pass loaded
// anything, beside the range it loaded.
func TestTheChainIsHandedWhatTheFloorCutOffTheWindow(t *testing.T) {
	const floor = 1_700_000_000_000
	src := &pipelinetest.Source{}
	src.Add("loads", pipeline.Point{TsMs: floor + 10, Value: 1}, pipeline.Point{TsMs: floor + 20, Value: 2})
	targets := []pipeline.Target{
		{Variable: pipeline.Variable{ID: "loads"}, Start: floor, End: floor + 1000, From: pipeline.NoMark},
		{Variable: pipeline.Variable{ID: "silent"}, Start: floor, End: floor + 1000, From: floor - 5000},
		{Variable: pipeline.Variable{ID: "unclamped"}, Start: floor, End: floor + 1000, From: floor},
	}
	st := &pipelinetest.Store{}
	ru := newMemLink(st)
	res := pipeline.NewEngine(src, &pipelinetest.Writer{}, st, pipeline.EngineOptions{Links: []pipeline.Link{ru.link()}}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 || res.CommitErr != nil {
		t.Fatalf("failed=%v commit=%v", res.Failed, res.CommitErr)
	}
	type got struct{ from, start, min, max, points int64 }
	for id, want := range map[string]got{
		"loads":     {from: pipeline.NoMark, start: floor, min: floor + 10, max: floor + 20, points: 2},
		"silent":    {from: floor - 5000, start: floor},
		"unclamped": {from: floor, start: floor},
	} {
		d := ru.done[id]
		if g := (got{from: d.From, start: d.Start, min: d.MinTs, max: d.MaxTs, points: d.Points}); g != want {
			t.Errorf("%s: handed %+v, want %+v", id, g, want)
		}
	}
}

// Issue 24, case 4: a first sync loads points just inside the retention
// window and stops before its commit (here a link of the chain fails, so
// no mark is written); by the next cycle the floor has moved past them, so
// it never reads them again. The next cycle hands the chain a target
// whose range covers them (covers), both when it loads newer points of
// the variable and when it loads nothing.
//
// A backfill that gives a variable its first mark takes over what the
// next cycle would have handed on: once its mark stands, cycles answer
// only for the mark's lookback, so nothing else would hand those points
// on (found by the simulation, seed 21550857777).
func TestAStoppedFirstSyncsPointsBelowTheNextFloorAreHandedToTheChain(t *testing.T) {
	const minute = int64(60_000)
	retention := 24 * time.Hour
	now := time.UnixMilli(1_750_000_000_000)
	floor0 := now.UnixMilli() - retention.Milliseconds()
	pt := func(ts int64) pipeline.Point { return pipeline.Point{TsMs: ts, Value: 1, Context: []byte("{}")} }
	for _, next := range []string{"cycle", "backfill"} {
		t.Run("the next pass a "+next, func(t *testing.T) {
			src := &pipelinetest.Source{}
			src.Add("newer", pt(floor0+minute), pt(floor0+2*minute), pt(now.UnixMilli()-minute))
			src.Add("silent", pt(floor0+minute), pt(floor0+2*minute))
			st := &pipelinetest.Store{}
			w := &pipelinetest.Writer{}
			ru := newMemLink(&pipelinetest.Store{})
			ru.fail = errors.New("recompute failed")
			clock := now
			s := pipeline.NewSyncer(src, w, pipeline.Stages{}, st, pipeline.SyncOptions{
				Engine:    pipeline.EngineOptions{RetryWait: time.Millisecond, Links: []pipeline.Link{ru.link()}},
				Retention: retention, Lookback: time.Hour, Now: func() time.Time { return clock },
			}, nil, nil)
			if _, err := s.Cycle(context.Background()); err == nil {
				t.Fatal("the first cycle succeeded although a link of its chain failed")
			}
			if len(st.Marks()) != 0 || len(w.Rows("silent")) != 2 {
				t.Fatalf("after the failed link: marks %v, %d points of silent stored; want none, 2", st.Marks(), len(w.Rows("silent")))
			}
			// The service drops what fell out of its window.
			clock = now.Add(5 * time.Minute)
			src.DropBefore(clock.UnixMilli() - retention.Milliseconds())
			ru.fail, ru.done = nil, map[string]pipeline.Done{}
			var err error
			if next == "cycle" {
				_, err = s.Cycle(context.Background())
			} else {
				// From the new floor, as `fleetsync backfill` without
				// --from starts: it gives "newer" its first mark.
				_, err = s.Backfill(context.Background(), s.Floor(clock), clock.UnixMilli(), nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := st.Marks()["newer"]; !ok {
				t.Fatalf("the %s gave newer no mark", next)
			}
			for _, id := range []string{"newer", "silent"} {
				d, ok := ru.done[id]
				for ts := range w.Rows(id) {
					if !ok || !covers(d, ts) {
						t.Errorf("%s: its point at floor%+d ms is stored, and the chain was handed from %d, start %d, %d points over [%d, %d] (handed: %v)",
							id, ts-floor0, d.From, d.Start, d.Points, d.MinTs, d.MaxTs, ok)
					}
				}
			}
		})
	}
}

// Each link's own time is a stage of the cycle's stage clock: in the
// summary, and in fleetsync_stage_duration_seconds under its Stage.
func TestACyclesLinksAreStagesOfItsClock(t *testing.T) {
	src := &pipelinetest.Source{}
	src.Add("v", pipeline.Point{TsMs: time.Now().Add(-time.Minute).UnixMilli(), Value: 1, Context: []byte("{}")})
	st := &pipelinetest.Store{}
	reg := prometheus.NewRegistry()
	m, err := pipeline.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ru := newMemLink(st)
	s := pipeline.NewSyncer(src, &pipelinetest.Writer{}, pipeline.Stages{}, st, pipeline.SyncOptions{
		Engine:    pipeline.EngineOptions{RetryWait: time.Millisecond, Links: []pipeline.Link{ru.link()}},
		Retention: 24 * time.Hour, Lookback: time.Hour,
	}, nil, m)
	sum, err := s.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Links) != 1 || sum.Links[0].Stage != "test" || sum.Links[0].Err != nil {
		t.Errorf("summary's links %+v, want the test link's", sum.Links)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var observed uint64
	for _, f := range families {
		if f.GetName() != "fleetsync_stage_duration_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == "test" {
					observed += mt.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if observed != 1 {
		t.Errorf("the test link's stage observed %d times in fleetsync_stage_duration_seconds, want once (the cycle's)", observed)
	}
}
