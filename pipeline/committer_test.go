package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The committer's rules on their own: holds, acknowledgements and the
// commit, with a fake StateStore (memStore) and link (memLink), and no
// reader, loader or source.

// newTestCommitter holds a target for each id, window [1000, 9000], with
// the link ru in front of the marks (nil for none).
func newTestCommitter(st *memStore, ru *memLink, ids ...string) *committer {
	var links []Link
	if ru != nil {
		links = []Link{ru.link()}
	}
	e := NewEngine(nil, nil, st, EngineOptions{Links: links}, nil, nil, nil)
	targets := make([]Target, len(ids))
	for i, id := range ids {
		targets[i] = Target{Variable: Variable{ID: id}, Start: 1000, End: 9000, From: 1000}
	}
	return newCommitter(e, targets)
}

func TestCommitterMarksATargetOnceItsReadsEndedAndEverySpanIsAcknowledged(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	c := newTestCommitter(st, nil, "a")
	ctx := context.Background()

	c.ack([]Span{{VariableID: "a", Rows: 3, MinTsMs: 1100, MaxTsMs: 1300}}, nil)
	c.commit(ctx, false)
	if len(st.marks) != 0 {
		t.Fatalf("a mark was written before the reader ended the target: %v", st.marks)
	}
	c.readEnded(readEnd{id: "a", start: 1000, futureMs: 12_000, spans: 2})
	c.commit(ctx, false)
	if len(st.marks) != 0 {
		t.Fatalf("a mark was written with one of two spans unacknowledged: %v", st.marks)
	}
	c.ack([]Span{{VariableID: "a", Rows: 2, MinTsMs: 2000, MaxTsMs: 2500}}, nil)
	c.commit(ctx, false)
	m, ok := st.marks["a"]
	if !ok || m.HwmMs != 2500 || m.CheckedMs != 9000 || m.FutureMs != 12_000 {
		t.Fatalf("mark %+v (written %v), want hwm 2500 (the greatest acknowledged), checked 9000, future 12000 (the reader's)", m, ok)
	}
	var res RunResult
	c.result(&res)
	if res.Completed != 1 || len(res.Failed) != 0 || res.Points != 5 {
		t.Errorf("completed %d, failed %v, points %d; want 1, none, 5", res.Completed, res.Failed, res.Points)
	}
}

func TestCommitterMarksATargetWithNothingToLoadAsSoonAsItsReadsEnd(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	c := newTestCommitter(st, nil, "empty")
	c.readEnded(readEnd{id: "empty", start: 1000})
	if points, done := c.loaded("empty"); !done || points != 0 {
		t.Fatalf("points %d, done %v; want 0 and done", points, done)
	}
	c.commit(context.Background(), false)
	if m, ok := st.marks["empty"]; !ok || m.HwmMs != 0 || m.CheckedMs != 9000 {
		t.Errorf("mark %+v (written %v), want hwm 0 checked 9000", m, ok)
	}
}

func TestCommitterKeepsTheMarkOfATargetWhoseLoadFailedAndHandsOnWhatLanded(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	ru := newMemLink(st)
	c := newTestCommitter(st, ru, "a", "b")
	c.readEnded(readEnd{id: "a", start: 1000, spans: 2})
	c.readEnded(readEnd{id: "b", start: 1000, spans: 1})
	c.ack([]Span{{VariableID: "a", Rows: 4, MinTsMs: 1500, MaxTsMs: 1800}}, nil)
	werr := errors.New("connection reset by peer")
	c.ack([]Span{{VariableID: "a", Rows: 4, MinTsMs: 1900, MaxTsMs: 2400}, {VariableID: "b", Rows: 1, MinTsMs: 3000, MaxTsMs: 3000}}, werr)
	c.commit(context.Background(), false)

	if len(st.marks) != 0 {
		t.Errorf("marks %v were written for targets whose rows failed to load", st.marks)
	}
	var res RunResult
	c.result(&res)
	if res.Completed != 0 || len(res.Failed) != 2 {
		t.Fatalf("completed %d, failed %d; want 0 and 2", res.Completed, len(res.Failed))
	}
	for _, f := range res.Failed {
		var le *LoadError
		if !errors.As(f.Err, &le) || !errors.Is(f.Err, werr) {
			t.Errorf("%s failed with %v, want a LoadError wrapping the writer's", f.Variable.ID, f.Err)
		}
	}
	// a's first span landed: the chain is handed its range, and the failure.
	if d := ru.done["a"]; d.Points != 4 || d.MinTs != 1500 || d.MaxTs != 1800 || !errors.Is(d.Err, werr) {
		t.Errorf("a handed with %d points over [%d, %d], err %v; want 4 over [1500, 1800] and the writer's error", d.Points, d.MinTs, d.MaxTs, d.Err)
	}
	if d, ok := ru.done["b"]; !ok || d.Points != 0 || d.Err == nil {
		t.Errorf("b handed %v with %d points, err %v; want handed, none, failed", ok, d.Points, d.Err)
	}
}

func TestCommitterKeepsATargetsFirstFailure(t *testing.T) {
	c := newTestCommitter(&memStore{marks: map[string]Mark{}}, nil, "a")
	first := errors.New("frame 0 could not be decoded")
	c.fail("a", first)
	c.readEnded(readEnd{id: "a", start: 1000, spans: 1})
	c.ack([]Span{{VariableID: "a", Rows: 1, MinTsMs: 1000, MaxTsMs: 1000}}, errors.New("later: write failed"))
	var res RunResult
	c.result(&res)
	if len(res.Failed) != 1 || !errors.Is(res.Failed[0].Err, first) {
		t.Fatalf("failed %v, want a's first failure", res.Failed)
	}
}

func TestCommitterHandsTheLinksTheTargetsBeforeWritingTheirMarks(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	ru := newMemLink(st)
	c := newTestCommitter(st, ru, "a", "b")
	for _, id := range []string{"a", "b"} {
		c.readEnded(readEnd{id: id, start: 1000, spans: 1})
		c.ack([]Span{{VariableID: id, Rows: 1, MinTsMs: 5000, MaxTsMs: 5000}}, nil)
	}
	c.commit(context.Background(), false)
	if len(ru.markedTooEarly) > 0 {
		t.Errorf("marks of %v were written before the link was handed their targets", ru.markedTooEarly)
	}
	if len(ru.done) != 2 || len(st.marks) != 2 {
		t.Errorf("handed %d, marked %d; want 2 and 2", len(ru.done), len(st.marks))
	}
}

func TestCommitterWritesNoMarkWhoseLinkFailed(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	herr := errors.New("code 241: memory limit exceeded")
	ru := newMemLink(st)
	ru.fail = herr
	c := newTestCommitter(st, ru, "a")
	c.readEnded(readEnd{id: "a", start: 1000, spans: 1})
	c.ack([]Span{{VariableID: "a", Rows: 1, MinTsMs: 5000, MaxTsMs: 5000}}, nil)
	c.commit(context.Background(), false)
	var res RunResult
	c.result(&res)
	if len(st.marks) != 0 || !errors.Is(res.CommitErr, herr) {
		t.Errorf("marks %v, commit error %v; want none and the link's error", st.marks, res.CommitErr)
	}
}

// failingStore refuses every commit.
type failingStore struct{ memStore }

func (*failingStore) Commit(context.Context, []Mark) error {
	return errors.New("table marks is read-only")
}

func TestCommitterReportsAFailedCommitOfMarks(t *testing.T) {
	st := &failingStore{}
	e := NewEngine(nil, nil, st, EngineOptions{}, nil, nil, nil)
	c := newCommitter(e, []Target{{Variable: Variable{ID: "a"}, End: 9000}})
	c.readEnded(readEnd{id: "a"})
	c.commit(context.Background(), false)
	var res RunResult
	c.result(&res)
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

func (l *callLink) link() Link {
	return Link{Stage: "test", Wrap: func(next Committer) Committer {
		return CommitFunc(func(ctx context.Context, done []Done, final bool) error {
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
		st := &memStore{marks: map[string]Mark{}}
		l := &callLink{}
		e := NewEngine(nil, nil, st, EngineOptions{Links: []Link{l.link()}}, nil, nil, nil)
		c := newCommitter(e, []Target{{Variable: Variable{ID: "a"}, End: 9000}, {Variable: Variable{ID: "b"}, End: 9000}})
		stop := make(chan struct{})
		ran := make(chan struct{})
		t0 := time.Now()
		go func() { defer close(ran); c.run(context.Background(), stop) }()
		c.readEnded(readEnd{id: "a"})
		time.Sleep(1500 * time.Millisecond)
		c.readEnded(readEnd{id: "b"})
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
		if len(st.marks) != 2 {
			t.Errorf("marks %v, want a's and b's", st.marks)
		}
	})
}

// slowStore takes took of the clock on each commit, then fails when its
// context is done or with fail.
type slowStore struct {
	memStore
	took time.Duration
	fail error
}

func (s *slowStore) Commit(ctx context.Context, marks []Mark) error {
	time.Sleep(s.took)
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.fail != nil {
		return s.fail
	}
	return s.memStore.Commit(ctx, marks)
}

// A link's time is its own: what the rest of the chain took, and its
// failure, are not the link's.
func TestLinkClockCountsTheLinksOwnTimeAndNotTheStoresFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowStore{memStore: memStore{marks: map[string]Mark{}}, took: 5 * time.Second, fail: errors.New("table marks is read-only")}
		own := Link{Stage: "own", Wrap: func(next Committer) Committer {
			return CommitFunc(func(ctx context.Context, done []Done, final bool) error {
				time.Sleep(time.Second)
				return next.Commit(ctx, done, final)
			})
		}}
		e := NewEngine(nil, nil, st, EngineOptions{Links: []Link{own}}, IncrementalMark, nil, nil)
		c := newCommitter(e, []Target{{Variable: Variable{ID: "a"}, End: 9000}})
		c.readEnded(readEnd{id: "a"})
		c.commit(context.Background(), true)
		var res RunResult
		c.result(&res)
		if res.CommitErr == nil {
			t.Fatal("want the store's failure in CommitErr")
		}
		if len(res.Links) != 1 || res.Links[0].Took != time.Second || res.Links[0].Err != nil {
			t.Errorf("link times %+v, want own: 1s and no failure (the store took 5s and failed)", res.Links)
		}
	})
}

// A cancelled run still writes the marks of the targets it completed
// (Engine.Run): the chain is handed a context that is never cancelled.
func TestTheFinalCallOfACancelledPassWritesTheMarks(t *testing.T) {
	st := &slowStore{memStore: memStore{marks: map[string]Mark{}}}
	e := NewEngine(nil, nil, st, EngineOptions{}, IncrementalMark, nil, nil)
	c := newCommitter(e, []Target{{Variable: Variable{ID: "a"}, End: 9000}})
	c.readEnded(readEnd{id: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.commit(ctx, true)
	var res RunResult
	c.result(&res)
	if _, ok := st.marks["a"]; !ok || res.CommitErr != nil {
		t.Errorf("marks %v, commit error %v; want a's mark written", st.marks, res.CommitErr)
	}
}
