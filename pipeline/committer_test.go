package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// The committer's rules on their own (pipeline.TestCommitter): holds,
// acknowledgements and the commit, with the kit's Store and a link that
// records what it is handed (memLink), and no reader, loader or source.

// newTestCommitter holds a target for each id, window [1000, 9000], with
// the link ru in front of the marks (nil for none).
func newTestCommitter(st *pipelinetest.Store, ru *memLink, ids ...string) pipeline.TestCommitter {
	var links []pipeline.Link
	if ru != nil {
		links = []pipeline.Link{ru.link()}
	}
	e := pipeline.NewEngine(nil, nil, st, pipeline.EngineOptions{Links: links}, nil, nil, nil)
	targets := make([]pipeline.Target, len(ids))
	for i, id := range ids {
		targets[i] = pipeline.Target{Variable: pipeline.Variable{ID: id}, Start: 1000, End: 9000, From: 1000}
	}
	return pipeline.NewTestCommitter(e, targets)
}

func TestCommitterMarksATargetOnceItsReadsEndedAndEverySpanIsAcknowledged(t *testing.T) {
	st := &pipelinetest.Store{}
	c := newTestCommitter(st, nil, "a")
	ctx := context.Background()

	c.Ack([]pipeline.Span{{VariableID: "a", Rows: 3, MinTsMs: 1100, MaxTsMs: 1300}}, nil)
	c.Commit(ctx, false)
	if len(st.Marks()) != 0 {
		t.Fatalf("a mark was written before the reader ended the target: %v", st.Marks())
	}
	c.ReadEnded("a", 1000, 12_000, 2)
	c.Commit(ctx, false)
	if len(st.Marks()) != 0 {
		t.Fatalf("a mark was written with one of two spans unacknowledged: %v", st.Marks())
	}
	c.Ack([]pipeline.Span{{VariableID: "a", Rows: 2, MinTsMs: 2000, MaxTsMs: 2500}}, nil)
	c.Commit(ctx, false)
	m, ok := st.Marks()["a"]
	if !ok || m.HwmMs != 2500 || m.CheckedMs != 9000 || m.FutureMs != 12_000 {
		t.Fatalf("mark %+v (written %v), want hwm 2500 (the greatest acknowledged), checked 9000, future 12000 (the reader's)", m, ok)
	}
	res := c.Result()
	if res.Completed != 1 || len(res.Failed) != 0 || res.Points != 5 {
		t.Errorf("completed %d, failed %v, points %d; want 1, none, 5", res.Completed, res.Failed, res.Points)
	}
}

func TestCommitterMarksATargetWithNothingToLoadAsSoonAsItsReadsEnd(t *testing.T) {
	st := &pipelinetest.Store{}
	c := newTestCommitter(st, nil, "empty")
	c.ReadEnded("empty", 1000, 0, 0)
	if points, done := c.Loaded("empty"); !done || points != 0 {
		t.Fatalf("points %d, done %v; want 0 and done", points, done)
	}
	c.Commit(context.Background(), false)
	if m, ok := st.Marks()["empty"]; !ok || m.HwmMs != 0 || m.CheckedMs != 9000 {
		t.Errorf("mark %+v (written %v), want hwm 0 checked 9000", m, ok)
	}
}

func TestCommitterKeepsTheMarkOfATargetWhoseLoadFailedAndHandsOnWhatLanded(t *testing.T) {
	st := &pipelinetest.Store{}
	ru := newMemLink(st)
	c := newTestCommitter(st, ru, "a", "b")
	c.ReadEnded("a", 1000, 0, 2)
	c.ReadEnded("b", 1000, 0, 1)
	c.Ack([]pipeline.Span{{VariableID: "a", Rows: 4, MinTsMs: 1500, MaxTsMs: 1800}}, nil)
	werr := errors.New("connection reset by peer")
	c.Ack([]pipeline.Span{{VariableID: "a", Rows: 4, MinTsMs: 1900, MaxTsMs: 2400}, {VariableID: "b", Rows: 1, MinTsMs: 3000, MaxTsMs: 3000}}, werr)
	c.Commit(context.Background(), false)

	if len(st.Marks()) != 0 {
		t.Errorf("marks %v were written for targets whose rows failed to load", st.Marks())
	}
	res := c.Result()
	if res.Completed != 0 || len(res.Failed) != 2 {
		t.Fatalf("completed %d, failed %d; want 0 and 2", res.Completed, len(res.Failed))
	}
	for _, f := range res.Failed {
		var le *pipeline.LoadError
		if !errors.As(f.Err, &le) || !errors.Is(f.Err, werr) {
			t.Errorf("%s failed with %v, want a LoadError wrapping the writer's", f.Variable.ID, f.Err)
		}
	}
	// a's first span landed: the chain is handed its range, and the failure.
	// Its second failed after its rows went out: they may be stored all
	// the same, so they are handed as sent.
	if d := ru.done["a"]; d.Points != 4 || d.MinTs != 1500 || d.MaxTs != 1800 || d.Sent != 8 || d.SentMinTs != 1500 || d.SentMaxTs != 2400 || !errors.Is(d.Err, werr) {
		t.Errorf("a handed with %d points over [%d, %d], %d sent over [%d, %d], err %v; want 4 over [1500, 1800], 8 over [1500, 2400] and the writer's error",
			d.Points, d.MinTs, d.MaxTs, d.Sent, d.SentMinTs, d.SentMaxTs, d.Err)
	}
	if d, ok := ru.done["b"]; !ok || d.Points != 0 || d.Sent != 1 || d.SentMinTs != 3000 || d.SentMaxTs != 3000 || d.Err == nil {
		t.Errorf("b handed %v with %d points, %d sent over [%d, %d], err %v; want handed, none, 1 over [3000, 3000], failed", ok, d.Points, d.Sent, d.SentMinTs, d.SentMaxTs, d.Err)
	}
}

func TestCommitterKeepsATargetsFirstFailure(t *testing.T) {
	c := newTestCommitter(&pipelinetest.Store{}, nil, "a")
	first := errors.New("frame 0 could not be decoded")
	c.Fail("a", first)
	c.ReadEnded("a", 1000, 0, 1)
	c.Ack([]pipeline.Span{{VariableID: "a", Rows: 1, MinTsMs: 1000, MaxTsMs: 1000}}, errors.New("later: write failed"))
	res := c.Result()
	if len(res.Failed) != 1 || !errors.Is(res.Failed[0].Err, first) {
		t.Fatalf("failed %v, want a's first failure", res.Failed)
	}
}

func TestCommitterHandsTheLinksTheTargetsBeforeWritingTheirMarks(t *testing.T) {
	st := &pipelinetest.Store{}
	ru := newMemLink(st)
	c := newTestCommitter(st, ru, "a", "b")
	for _, id := range []string{"a", "b"} {
		c.ReadEnded(id, 1000, 0, 1)
		c.Ack([]pipeline.Span{{VariableID: id, Rows: 1, MinTsMs: 5000, MaxTsMs: 5000}}, nil)
	}
	c.Commit(context.Background(), false)
	if len(ru.markedTooEarly) > 0 {
		t.Errorf("marks of %v were written before the link was handed their targets", ru.markedTooEarly)
	}
	if len(ru.done) != 2 || len(st.Marks()) != 2 {
		t.Errorf("handed %d, marked %d; want 2 and 2", len(ru.done), len(st.Marks()))
	}
}

func TestCommitterWritesNoMarkWhoseLinkFailed(t *testing.T) {
	st := &pipelinetest.Store{}
	herr := errors.New("code 241: memory limit exceeded")
	ru := newMemLink(st)
	ru.fail = herr
	c := newTestCommitter(st, ru, "a")
	c.ReadEnded("a", 1000, 0, 1)
	c.Ack([]pipeline.Span{{VariableID: "a", Rows: 1, MinTsMs: 5000, MaxTsMs: 5000}}, nil)
	c.Commit(context.Background(), false)
	res := c.Result()
	if len(st.Marks()) != 0 || !errors.Is(res.CommitErr, herr) {
		t.Errorf("marks %v, commit error %v; want none and the link's error", st.Marks(), res.CommitErr)
	}
}

func TestCommitterReportsAFailedCommitOfMarks(t *testing.T) {
	// The store refuses every commit.
	st := &pipelinetest.Store{OnCommit: func(context.Context, []pipeline.Mark) error {
		return errors.New("table marks is read-only")
	}}
	e := pipeline.NewEngine(nil, nil, st, pipeline.EngineOptions{}, nil, nil, nil)
	c := pipeline.NewTestCommitter(e, []pipeline.Target{{Variable: pipeline.Variable{ID: "a"}, End: 9000}})
	c.ReadEnded("a", 0, 0, 0)
	c.Commit(context.Background(), false)
	res := c.Result()
	if res.CommitErr == nil || res.Completed != 1 {
		t.Errorf("commit error %v, completed %d; want the store's error and 1", res.CommitErr, res.Completed)
	}
}

// callLink records each call of the chain: when, whether final, and the
// targets handed.
type callLink struct {
	mu    sync.Mutex
	calls []linkCall
}

type linkCall struct {
	at    time.Time
	final bool
	ids   []string
}

func (l *callLink) link() pipeline.Link {
	return pipeline.Link{Stage: "test", Wrap: func(next pipeline.Committer) pipeline.Committer {
		return pipeline.CommitFunc(func(ctx context.Context, done []pipeline.Done, final bool) error {
			call := linkCall{at: time.Now(), final: final}
			for _, d := range done {
				call.ids = append(call.ids, d.Variable.ID)
			}
			l.mu.Lock()
			l.calls = append(l.calls, call)
			l.mu.Unlock()
			return next.Commit(ctx, done, final)
		})
	}}
}

func TestCommitterRunHandsOnEverySecondAndOnceMoreWhenStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &pipelinetest.Store{}
		l := &callLink{}
		e := pipeline.NewEngine(nil, nil, st, pipeline.EngineOptions{Links: []pipeline.Link{l.link()}}, nil, nil, nil)
		c := pipeline.NewTestCommitter(e, []pipeline.Target{{Variable: pipeline.Variable{ID: "a"}, End: 9000}, {Variable: pipeline.Variable{ID: "b"}, End: 9000}})
		stop := make(chan struct{})
		ran := make(chan struct{})
		t0 := time.Now()
		go func() { defer close(ran); c.Run(context.Background(), stop) }()
		c.ReadEnded("a", 0, 0, 0)
		time.Sleep(1500 * time.Millisecond)
		c.ReadEnded("b", 0, 0, 0)
		time.Sleep(200 * time.Millisecond)
		close(stop)
		<-ran
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.calls) != 2 {
			t.Fatalf("%d calls of the chain, want 2 (the tick at 1 s, the final one): %+v", len(l.calls), l.calls)
		}
		first, last := l.calls[0], l.calls[1]
		if first.at.Sub(t0) != time.Second || first.final || len(first.ids) != 1 || first.ids[0] != "a" {
			t.Errorf("first call %+v at %v, want a, not final, at 1s", first, first.at.Sub(t0))
		}
		if !last.final || len(last.ids) != 1 || last.ids[0] != "b" {
			t.Errorf("last call %+v, want b, final", last)
		}
		if len(st.Marks()) != 2 {
			t.Errorf("marks %v, want a's and b's", st.Marks())
		}
	})
}

// slowCommits makes each commit to st take took of the clock, then fail
// when its context is done, or with fail.
func slowCommits(st *pipelinetest.Store, took time.Duration, fail error) {
	st.OnCommit = func(ctx context.Context, _ []pipeline.Mark) error {
		time.Sleep(took)
		if err := ctx.Err(); err != nil {
			return err
		}
		return fail
	}
}

// A link's time is its own: what the rest of the chain took, and its
// failure, are not the link's.
func TestLinkClockCountsTheLinksOwnTimeAndNotTheStoresFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &pipelinetest.Store{}
		slowCommits(st, 5*time.Second, errors.New("table marks is read-only"))
		own := pipeline.Link{Stage: "own", Wrap: func(next pipeline.Committer) pipeline.Committer {
			return pipeline.CommitFunc(func(ctx context.Context, done []pipeline.Done, final bool) error {
				time.Sleep(time.Second)
				return next.Commit(ctx, done, final)
			})
		}}
		e := pipeline.NewEngine(nil, nil, st, pipeline.EngineOptions{Links: []pipeline.Link{own}}, pipeline.IncrementalMark, nil, nil)
		c := pipeline.NewTestCommitter(e, []pipeline.Target{{Variable: pipeline.Variable{ID: "a"}, End: 9000}, {Variable: pipeline.Variable{ID: "b"}, End: 9000}})
		// Two calls: the second subtracts only its own call's store time,
		// not the first's again.
		c.ReadEnded("a", 0, 0, 0)
		c.Commit(context.Background(), false)
		c.ReadEnded("b", 0, 0, 0)
		c.Commit(context.Background(), true)
		res := c.Result()
		if res.CommitErr == nil {
			t.Fatal("want the store's failure in CommitErr")
		}
		if len(res.Links) != 1 || res.Links[0].Took != 2*time.Second || res.Links[0].Err != nil {
			t.Errorf("link times %+v, want own: 2s over two calls and no failure (the store took 5s a call and failed)", res.Links)
		}
	})
}

// A cancelled run still writes the marks of the targets it completed
// (Engine.Run): the chain is handed a context that is never cancelled.
func TestTheFinalCallOfACancelledPassWritesTheMarks(t *testing.T) {
	st := &pipelinetest.Store{}
	slowCommits(st, 0, nil)
	e := pipeline.NewEngine(nil, nil, st, pipeline.EngineOptions{}, pipeline.IncrementalMark, nil, nil)
	c := pipeline.NewTestCommitter(e, []pipeline.Target{{Variable: pipeline.Variable{ID: "a"}, End: 9000}})
	c.ReadEnded("a", 0, 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Commit(ctx, true)
	res := c.Result()
	if _, ok := st.Marks()["a"]; !ok || res.CommitErr != nil {
		t.Errorf("marks %v, commit error %v; want a's mark written", st.Marks(), res.CommitErr)
	}
}
