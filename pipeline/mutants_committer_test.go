package pipeline

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Tests that kill mutants make mutate found alive in committer.go: the
// smallest acknowledged timestamp whatever the order of the acks, and the
// pacing of commits after a recompute, on synctest's virtual clock.

func TestCommitterHandsTheHookTheSmallestLoadedTimestampWhateverTheAckOrder(t *testing.T) {
	// A mark ahead of the clock: its lookback lies past the cycle's end, so
	// the plan re-reads the lookback before now, below From, and the range
	// handed to the hook starts at the smallest point loaded.
	e := NewEngine(nil, nil, nil, EngineOptions{}, nil, nil, nil)
	c := newCommitter(e, []Target{{Variable: Variable{ID: "a"}, Start: 1000, End: 9000, From: 50_000}})
	c.ack([]Span{{VariableID: "a", Rows: 3, MinTsMs: 1100, MaxTsMs: 1300}}, nil)
	c.ack([]Span{{VariableID: "a", Rows: 2, MinTsMs: 2000, MaxTsMs: 2500}}, nil)
	c.ack([]Span{{VariableID: "a", Rows: 1, MinTsMs: 1500, MaxTsMs: 1500}}, nil)
	c.readEnded(readEnd{id: "a", start: 1000, spans: 3})
	want := Touched{VariableID: "a", FromMs: 1100, ToMs: 2500, Loaded: true}
	if len(c.touched) != 1 || c.touched[0] != want {
		t.Fatalf("touched %+v, want [%+v]", c.touched, want)
	}
}

// clockedRollup takes took of the virtual clock on each call and notes
// when each call began.
type clockedRollup struct {
	mu    sync.Mutex
	took  time.Duration
	calls []time.Time
}

func (r *clockedRollup) Recompute(context.Context, []Touched) error {
	r.mu.Lock()
	r.calls = append(r.calls, time.Now())
	r.mu.Unlock()
	time.Sleep(r.took)
	return nil
}

func (r *clockedRollup) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func TestCommitterWaitsTenTimesTheRecomputesTimeBeforeTheNextCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A recompute of 120 ms holds the next commit back 1.2 s
		// (rollupPace+1 times it): the tick 1 s after it is skipped, the
		// one 2 s after it commits. A pace of 8 times would commit at the
		// first tick.
		hook := &clockedRollup{took: 120 * time.Millisecond}
		e := NewEngine(nil, nil, nil, EngineOptions{Rollup: hook}, nil, nil, nil)
		// Windows cut by the floor (From below Start): each is handed to
		// the hook once its reads end, with nothing loaded.
		var targets []Target
		for _, id := range []string{"a", "b"} {
			targets = append(targets, Target{Variable: Variable{ID: id}, Start: 1000, End: 9000, From: 500})
		}
		c := newCommitter(e, targets)
		stop := make(chan struct{})
		ran := make(chan struct{})
		t0 := time.Now()
		go func() { defer close(ran); c.run(context.Background(), stop) }()

		c.readEnded(readEnd{id: "a", start: 1000})
		time.Sleep(1500 * time.Millisecond)
		if n := hook.count(); n != 1 {
			t.Fatalf("%d recomputes after 1.5 s, want 1 (at the first tick)", n)
		}
		c.readEnded(readEnd{id: "b", start: 1000})
		time.Sleep(time.Second) // past the second tick, 2 s after t0
		if n := hook.count(); n != 1 {
			t.Fatalf("b's range was recomputed at the tick 1 s after a recompute of %v, within its pace", hook.took)
		}
		time.Sleep(time.Second) // past the third tick
		if n := hook.count(); n != 2 {
			t.Fatalf("%d recomputes 3.5 s in, want 2 (the third tick)", n)
		}
		close(stop)
		<-ran
		if first, second := hook.calls[0].Sub(t0), hook.calls[1].Sub(t0); first != time.Second || second != 3*time.Second {
			t.Errorf("recomputes began %v and %v after the start, want 1s and 3s", first, second)
		}
	})
}
