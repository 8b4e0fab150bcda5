package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// The committer's rules on their own: holds, acknowledgements and the
// commit, with a fake StateStore (memStore) and Rollup (memRollup), and
// no reader, loader or source.

// newTestCommitter holds a target for each id, window [1000, 9000], with
// the hook ru (nil for none).
func newTestCommitter(st *memStore, ru Rollup, ids ...string) *committer {
	e := NewEngine(nil, nil, st, EngineOptions{Rollup: ru}, nil, nil, nil)
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
	c.commit(ctx)
	if len(st.marks) != 0 {
		t.Fatalf("a mark was written before the reader ended the target: %v", st.marks)
	}
	c.readEnded(readEnd{id: "a", start: 1000, futureMs: 12_000, spans: 2})
	c.commit(ctx)
	if len(st.marks) != 0 {
		t.Fatalf("a mark was written with one of two spans unacknowledged: %v", st.marks)
	}
	c.ack([]Span{{VariableID: "a", Rows: 2, MinTsMs: 2000, MaxTsMs: 2500}}, nil)
	c.commit(ctx)
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
	c.commit(context.Background())
	if m, ok := st.marks["empty"]; !ok || m.HwmMs != 0 || m.CheckedMs != 9000 {
		t.Errorf("mark %+v (written %v), want hwm 0 checked 9000", m, ok)
	}
}

func TestCommitterKeepsTheMarkOfATargetWhoseLoadFailedAndRollsUpWhatLanded(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	ru := &memRollup{st: st, touched: map[string]Touched{}}
	c := newTestCommitter(st, ru, "a", "b")
	c.readEnded(readEnd{id: "a", start: 1000, spans: 2})
	c.readEnded(readEnd{id: "b", start: 1000, spans: 1})
	c.ack([]Span{{VariableID: "a", Rows: 4, MinTsMs: 1500, MaxTsMs: 1800}}, nil)
	werr := errors.New("connection reset by peer")
	c.ack([]Span{{VariableID: "a", Rows: 4, MinTsMs: 1900, MaxTsMs: 2400}, {VariableID: "b", Rows: 1, MinTsMs: 3000, MaxTsMs: 3000}}, werr)
	c.commit(context.Background())

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
	// a's first span landed: the hook gets it, widened down to From.
	if got, want := ru.touched["a"], (Touched{VariableID: "a", FromMs: 1000, ToMs: 1800, Loaded: true}); got != want {
		t.Errorf("touched %+v, want %+v", got, want)
	}
	if _, ok := ru.touched["b"]; ok {
		t.Errorf("b loaded nothing, yet the hook was handed %+v", ru.touched["b"])
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

func TestCommitterRecomputesTheRollupsBeforeWritingTheMarks(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	ru := &memRollup{st: st, touched: map[string]Touched{}}
	c := newTestCommitter(st, ru, "a", "b")
	for _, id := range []string{"a", "b"} {
		c.readEnded(readEnd{id: id, start: 1000, spans: 1})
		c.ack([]Span{{VariableID: id, Rows: 1, MinTsMs: 5000, MaxTsMs: 5000}}, nil)
	}
	if rolled := c.commit(context.Background()); rolled <= 0 {
		t.Errorf("commit returned %v for the hook's time, want it measured", rolled)
	}
	if len(ru.markedTooEarly) > 0 {
		t.Errorf("marks of %v were written before their rollups were recomputed", ru.markedTooEarly)
	}
	if len(ru.touched) != 2 || len(st.marks) != 2 {
		t.Errorf("recomputed %d, marked %d; want 2 and 2", len(ru.touched), len(st.marks))
	}
}

func TestCommitterWritesNoMarkWhoseRollupFailed(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	herr := errors.New("code 241: memory limit exceeded")
	ru := &memRollup{st: st, touched: map[string]Touched{}, fail: herr}
	c := newTestCommitter(st, ru, "a")
	c.readEnded(readEnd{id: "a", start: 1000, spans: 1})
	c.ack([]Span{{VariableID: "a", Rows: 1, MinTsMs: 5000, MaxTsMs: 5000}}, nil)
	c.commit(context.Background())
	var res RunResult
	c.result(&res)
	if len(st.marks) != 0 || !errors.Is(res.CommitErr, herr) {
		t.Errorf("marks %v, commit error %v; want none and the hook's error", st.marks, res.CommitErr)
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
	c.commit(context.Background())
	var res RunResult
	c.result(&res)
	if res.CommitErr == nil || res.Completed != 1 {
		t.Errorf("commit error %v, completed %d; want the store's error and 1", res.CommitErr, res.Completed)
	}
}

// slowRollup takes its time on each call and counts the calls.
type slowRollup struct {
	mu    sync.Mutex
	calls int
	took  time.Duration
}

func (r *slowRollup) Recompute(context.Context, []Touched) error {
	time.Sleep(r.took)
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	return nil
}

func TestCommitterRunCommitsEverySecondPacedAndOnceMoreWhenStopped(t *testing.T) {
	st := &memStore{marks: map[string]Mark{}}
	ru := &slowRollup{took: 300 * time.Millisecond}
	c := newTestCommitter(st, ru, "a", "b")
	stop := make(chan struct{})
	ran := make(chan struct{})
	go func() { defer close(ran); c.run(context.Background(), stop) }()

	c.readEnded(readEnd{id: "a", start: 1000, spans: 1})
	c.ack([]Span{{VariableID: "a", Rows: 1, MinTsMs: 5000, MaxTsMs: 5000}}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st.mu.Lock()
		_, ok := st.marks["a"]
		st.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the committer did not commit a's mark within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The recompute took 300 ms: the next commit waits rollupPace+1 times
	// that, 3 s, so b, done now, is committed only when run is stopped.
	c.readEnded(readEnd{id: "b", start: 1000, spans: 1})
	c.ack([]Span{{VariableID: "b", Rows: 1, MinTsMs: 5000, MaxTsMs: 5000}}, nil)
	time.Sleep(1500 * time.Millisecond)
	st.mu.Lock()
	_, early := st.marks["b"]
	st.mu.Unlock()
	if early {
		t.Errorf("b's mark was committed within the pacing after a's recompute")
	}
	close(stop)
	<-ran
	if _, ok := st.marks["b"]; !ok {
		t.Errorf("b's mark was not committed when run was stopped")
	}
	if ru.calls != 2 {
		t.Errorf("the hook was called %d times, want 2", ru.calls)
	}
}
