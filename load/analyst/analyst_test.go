package analyst

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// done is a target of window [1000, 9000], read from 1000, answering from
// from, with points rows loaded over [lo, hi] and none failed.
func done(id string, from int64, points, lo, hi int64) pipeline.Done {
	return pipeline.Done{Target: pipeline.Target{Variable: pipeline.Variable{ID: id}, Start: 1000, End: 9000, From: from},
		Outcome: pipeline.Outcome{MaxTs: hi, StartMs: 1000}, Points: points, MinTs: lo, Sent: points, SentMinTs: lo, SentMaxTs: hi}
}

func TestRangeOfIsTheLoadedRangeWidenedToFromOrWhatTheFloorCutOff(t *testing.T) {
	failed := done("failed", 1000, 4, 1500, 1800)
	failed.Err = errors.New("connection reset by peer")
	// 4 rows acknowledged over [1500, 1800], then an INSERT of 3 more
	// over [1900, 2400] failed: it may have stored them all the same.
	failedAfter := failed
	failedAfter.Sent, failedAfter.SentMaxTs = 7, 2400
	// Nothing acknowledged, 2 rows over [1200, 1300] sent and failed.
	failedOnly := done("failed", 1000, 0, 0, 0)
	failedOnly.Sent, failedOnly.SentMinTs, failedOnly.SentMaxTs, failedOnly.Err = 2, 1200, 1300, errors.New("connection reset by peer")
	// The retention floor turned out to be at 1600 during the read, after
	// rows over [1100, 1400] were loaded: a pass that stopped before its
	// commit may have loaded the points of [1000, 1599] too.
	floorMoved := done("a", 1000, 2, 1100, 1400)
	floorMoved.StartMs = 1600
	floorNothing := done("a", 1000, 0, 0, 0)
	floorNothing.StartMs = 1600
	for _, c := range []struct {
		name string
		d    pipeline.Done
		want Range
		ok   bool
	}{
		{"loaded, from below", done("a", 500, 3, 1100, 2500), Range{VariableID: "a", FromMs: 500, ToMs: 2500, Loaded: true}, true},
		// A mark ahead of the clock: From past the points re-read.
		{"loaded, from above", done("a", 50_000, 3, 1100, 2500), Range{VariableID: "a", FromMs: 1100, ToMs: 2500, Loaded: true}, true},
		{"loaded, no mark", done("a", math.MinInt64, 1, 1100, 1100), Range{VariableID: "a", FromMs: math.MinInt64, ToMs: 1100, Loaded: true}, true},
		{"nothing loaded, window cut by the floor", done("a", 500, 0, 0, 0), Range{VariableID: "a", FromMs: 500, ToMs: 999}, true},
		{"nothing loaded, window whole", done("a", 1000, 0, 0, 0), Range{}, false},
		// The rows of a failed target are in the warehouse all the same.
		{"failed after loading", failed, Range{VariableID: "failed", FromMs: 1000, ToMs: 1800, Loaded: true}, true},
		// So may be those of an INSERT that failed.
		{"failed insert above the loaded rows", failedAfter, Range{VariableID: "failed", FromMs: 1000, ToMs: 2400}, true},
		{"failed insert alone", failedOnly, Range{VariableID: "failed", FromMs: 1000, ToMs: 1300}, true},
		{"floor moved above the loaded rows", floorMoved, Range{VariableID: "a", FromMs: 1000, ToMs: 1599}, true},
		{"floor moved, nothing loaded", floorNothing, Range{VariableID: "a", FromMs: 1000, ToMs: 1599}, true},
	} {
		if got, ok := RangeOf(c.d); got != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// memTables records what it is asked to recompute and when, taking took
// of the (virtual) clock each time, and fails with fail.
type memTables struct {
	mu     sync.Mutex
	took   time.Duration
	fail   error
	calls  []time.Time
	ranges []Range
}

func (m *memTables) Recompute(_ context.Context, ranges []Range) error {
	m.mu.Lock()
	m.calls = append(m.calls, time.Now())
	m.ranges = append(m.ranges, ranges...)
	m.mu.Unlock()
	time.Sleep(m.took)
	return m.fail
}

// next records what the link hands on, and whether the tables had been
// recomputed for it by then.
type next struct {
	tables *memTables
	handed []string
	early  []string
	finals int
}

func (n *next) Commit(_ context.Context, done []pipeline.Done, final bool) error {
	n.tables.mu.Lock()
	defer n.tables.mu.Unlock()
	for _, d := range done {
		n.handed = append(n.handed, d.Variable.ID)
		if _, ok := RangeOf(d); !ok {
			continue
		}
		found := false
		for _, r := range n.tables.ranges {
			found = found || r.VariableID == d.Variable.ID
		}
		if !found {
			n.early = append(n.early, d.Variable.ID)
		}
	}
	if final {
		n.finals++
	}
	return nil
}

func TestLinkRecomputesBeforeHandingOn(t *testing.T) {
	// On the virtual clock a recompute takes no time, so its pace holds
	// nothing back: each call is handed on at once, however fast it comes.
	synctest.Test(t, func(t *testing.T) {
		tables := &memTables{}
		n := &next{tables: tables}
		l := Link(tables).Wrap(n)
		if err := l.Commit(context.Background(), []pipeline.Done{done("a", 500, 2, 1100, 1200), done("whole", 1000, 0, 0, 0)}, false); err != nil {
			t.Fatal(err)
		}
		if len(n.early) > 0 || len(n.handed) != 2 {
			t.Errorf("handed %v, of which %v before their recompute; want a and whole, none early", n.handed, n.early)
		}
		if len(tables.ranges) != 1 || tables.ranges[0].VariableID != "a" {
			t.Errorf("recomputed %+v, want a's range alone", tables.ranges)
		}
		// Nothing to recompute: no statement, and nothing held back after it.
		if err := l.Commit(context.Background(), []pipeline.Done{done("whole2", 1000, 0, 0, 0)}, false); err != nil {
			t.Fatal(err)
		}
		if len(tables.calls) != 1 || len(n.handed) != 3 {
			t.Errorf("%d recomputes, handed %v; want still 1, and whole2 handed on at once", len(tables.calls), n.handed)
		}
	})
}

func TestLinkHandsNothingOnWhenTheRecomputeFails(t *testing.T) {
	boom := errors.New("code 241: memory limit exceeded")
	tables := &memTables{fail: boom}
	n := &next{tables: tables}
	l := Link(tables).Wrap(n)
	err := l.Commit(context.Background(), []pipeline.Done{done("a", 500, 2, 1100, 1200)}, true)
	if !errors.Is(err, boom) || len(n.handed) != 0 {
		t.Errorf("error %v, handed %v; want the recompute's error and nothing handed on", err, n.handed)
	}
	// The next call starts afresh: what failed is not handed again.
	tables.fail = nil
	if err := l.Commit(context.Background(), []pipeline.Done{done("b", 500, 1, 1100, 1100)}, true); err != nil || len(n.handed) != 1 || n.handed[0] != "b" {
		t.Errorf("error %v, handed %v; want b alone", err, n.handed)
	}
}

func TestLinkWaitsTenTimesTheRecomputesTimeBeforeTheNextAndNeverPastTheFinalCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A recompute of 120 ms holds what comes next back 1.2 s (Pace+1
		// times it): a call 1 s after it is held, one 2 s after it is
		// not. A pace of 8 times would not hold the first.
		tables := &memTables{took: 120 * time.Millisecond}
		n := &next{tables: tables}
		l := Link(tables).Wrap(n)
		ctx := context.Background()
		t0 := time.Now()
		commit := func(at time.Duration, final bool, d ...pipeline.Done) {
			time.Sleep(t0.Add(at).Sub(time.Now()))
			if err := l.Commit(ctx, d, final); err != nil {
				t.Fatal(err)
			}
		}
		commit(time.Second, false, done("a", 500, 0, 0, 0))
		commit(2*time.Second, false, done("b", 500, 0, 0, 0))
		if len(tables.calls) != 1 || len(n.handed) != 1 {
			t.Fatalf("%d recomputes, %v handed on 1 s after a recompute of %v; want b held back", len(tables.calls), n.handed, tables.took)
		}
		commit(3*time.Second, false)
		if len(tables.calls) != 2 || len(n.handed) != 2 || n.handed[1] != "b" {
			t.Fatalf("%d recomputes, %v handed on 2 s after; want b's", len(tables.calls), n.handed)
		}
		if got := tables.calls[1].Sub(t0); got != 3*time.Second {
			t.Errorf("b recomputed %v after the start, want 3s", got)
		}
		// Within the pace again, but the pass's last call: nothing held.
		commit(3500*time.Millisecond, true, done("c", 500, 0, 0, 0))
		if len(tables.calls) != 3 || len(n.handed) != 3 || n.finals != 1 {
			t.Errorf("%d recomputes, %v handed, %d final calls handed on; want c's at once", len(tables.calls), n.handed, n.finals)
		}
	})
}

func TestLinkHoldsAMinuteAtMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tables := &memTables{took: 20 * time.Second}
		n := &next{tables: tables}
		l := Link(tables).Wrap(n)
		ctx := context.Background()
		_ = l.Commit(ctx, []pipeline.Done{done("a", 500, 0, 0, 0)}, false)
		time.Sleep(MaxGap - 20*time.Second - time.Millisecond)
		_ = l.Commit(ctx, []pipeline.Done{done("b", 500, 0, 0, 0)}, false)
		if len(n.handed) != 1 {
			t.Fatalf("handed %v within a minute of the start of a 20 s recompute, want b held", n.handed)
		}
		time.Sleep(2 * time.Millisecond)
		_ = l.Commit(ctx, nil, false)
		if len(n.handed) != 2 {
			t.Errorf("handed %v a minute after the start of a 20 s recompute (200 s by the pace alone), want b", n.handed)
		}
	})
}
