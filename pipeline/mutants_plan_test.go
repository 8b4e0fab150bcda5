package pipeline

import (
	"testing"
	"time"
)

// Tests that kill mutants make mutate found alive in plan.go: a mark that
// has loaded nothing yet, a mark whose lookback begins exactly now, and a
// request's start exactly at a target's slack.

func TestPlanTakesAMarkThatLoadedNothingAsNoMark(t *testing.T) {
	const floor, end = 1000, 90_000
	got, _ := Plan([]Variable{{ID: "v"}}, map[string]Mark{"v": {VariableID: "v", HwmMs: 0, CheckedMs: 80_000}},
		PlanOptions{Lookback: time.Minute, Floor: floor, End: end})
	if len(got) != 1 {
		t.Fatalf("%d targets, want 1", len(got))
	}
	if tg := got[0]; tg.Start != floor || tg.From != noMark || tg.Reread != floor || !tg.HasMark {
		t.Errorf("start %d, from %d, reread %d; want the floor, noMark and the floor (what it read from)", tg.Start, tg.From, tg.Reread)
	}
}

func TestPlanReadsAMarkWhoseLookbackBeginsNowFromNow(t *testing.T) {
	// A mark exactly a lookback ahead of the clock: its window is [end, end],
	// not yet a mark in the future (which re-reads the lookback before now).
	const end, lookback = 10_000_000, 60_000
	got, _ := Plan([]Variable{{ID: "v"}}, map[string]Mark{"v": {VariableID: "v", HwmMs: end + lookback}},
		PlanOptions{Lookback: lookback * time.Millisecond, Floor: 1, End: end})
	if len(got) != 1 || got[0].Start != end {
		t.Fatalf("targets %+v, want one starting at %d", got, end)
	}
	got, _ = Plan([]Variable{{ID: "v"}}, map[string]Mark{"v": {VariableID: "v", HwmMs: end + lookback + 1}},
		PlanOptions{Lookback: lookback * time.Millisecond, Floor: 1, End: end})
	if len(got) != 1 || got[0].Start != end-lookback {
		t.Fatalf("targets %+v, want one starting at %d (a mark in the future)", got, end-lookback)
	}
}

func TestGroupSharesARequestWhoseStartIsExactlyATargetsSlackAway(t *testing.T) {
	// Short windows: a slack of minSlack. b starts exactly that far after
	// a and shares its request; c, a millisecond further, does not.
	state := func(id string, start int64) *targetState {
		return &targetState{Target: Target{Variable: Variable{ID: id}}, start: start, end: 100_000}
	}
	reqs := Group([]*targetState{state("a", 0), state("b", minSlack)}, 10)
	if len(reqs) != 1 || len(reqs[0].targets) != 2 || reqs[0].start != 0 {
		t.Errorf("a and b: %d requests, want one from 0", len(reqs))
	}
	reqs = Group([]*targetState{state("a", 0), state("c", minSlack+1)}, 10)
	if len(reqs) != 2 {
		t.Errorf("a and c: %d requests, want 2", len(reqs))
	}
}
