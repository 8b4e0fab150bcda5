package pipeline

import (
	"fmt"
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
	// Windows of a few minutes: a slack of minSlack. b starts exactly that
	// far after a and shares its request; c, a millisecond further, does
	// not.
	state := func(id string, start, end int64) *targetState {
		return &targetState{Target: Target{Variable: Variable{ID: id}}, start: start, end: end}
	}
	reqs := Group([]*targetState{state("a", 0, 200_000), state("b", minSlack, 200_000)}, 10)
	if len(reqs) != 1 || len(reqs[0].targets) != 2 || reqs[0].start != 0 {
		t.Errorf("a and b: %d requests, want one from 0", len(reqs))
	}
	reqs = Group([]*targetState{state("a", 0, 200_000), state("c", minSlack+1, 200_000)}, 10)
	if len(reqs) != 2 {
		t.Errorf("a and c: %d requests, want 2", len(reqs))
	}
	// Windows shorter than minSlack: a slack of the window itself. d's
	// window of 50 s starts 50 s after a's start and shares; e's, 1 ms
	// further, does not (it would be served more than twice its window).
	const end = 100_000
	reqs = Group([]*targetState{state("a", 0, end), state("d", end/2, end)}, 10)
	if len(reqs) != 1 || len(reqs[0].targets) != 2 {
		t.Errorf("a and d: %d requests, want one", len(reqs))
	}
	reqs = Group([]*targetState{state("a", 0, end), state("e", end/2+1, end)}, 10)
	if len(reqs) != 2 {
		t.Errorf("a and e: %d requests, want 2", len(reqs))
	}
}

// A re-read pays what its mark owed only up to its end: planned with a
// mark ahead of the end (one a run that ended later committed, as when
// this cycle planned after it), the points owed past the end stay owed.
// Its Reread is what MergeMark takes when it is the greater, so an
// overstated one would drop a debt another run had left.
func TestARereadOfAMarkAheadOfItsEndOwesWhatLiesPastTheEnd(t *testing.T) {
	const lookback, end = 60_000, 10_000_000
	for _, c := range []struct {
		name            string
		hwm, owed, want int64
	}{
		{"a mark behind the end: from its lookback", end - 5_000, end - 200_000, end - 5_000 - lookback},
		{"the mark's lookback exactly at the end", end + 1 + lookback, end - 200_000, end + 1},
		{"a mark ahead of the end: from just past the end", end + 500_000, end - 200_000, end + 1},
		{"a mark ahead of the end owing past it: what it owed", end + 500_000, end + 100_000, end + 100_000},
		{"a mark ahead of the end owing nothing recorded: its lookback", end + 500_000, 0, end + 500_000 - lookback},
	} {
		m := Mark{VariableID: "v", HwmMs: c.hwm, RereadMs: c.owed, RecheckedMs: 1}
		got, _ := Plan([]Variable{{ID: "v"}}, map[string]Mark{"v": m}, PlanOptions{Lookback: lookback * time.Millisecond, Floor: 1, End: end, IdleRecheck: time.Hour})
		if len(got) != 1 || got[0].Tail || got[0].Reread != c.want {
			t.Errorf("%s: targets %+v, want a re-read whose Reread is %d", c.name, got, c.want)
		}
	}
}

// The re-read slots of a shard are one per VariablesPerRequest of the
// variables it holds, not of the whole chunk walked: with the others
// counted, a shard's slot would hold a fraction of a request's variables,
// and its re-reads would spread over that many more requests.
func TestRecheckSlotsCountTheVariablesTheShardHolds(t *testing.T) {
	vars := make([]Variable, 1000)
	for i := range vars {
		vars[i] = Variable{ID: fmt.Sprintf("var%05d", i)}
	}
	shard := Shard{Index: 1, Count: 4}
	held := 0
	for _, v := range vars {
		if shard.Holds(v.ID) {
			held++
		}
	}
	if held == 0 || held == len(vars) {
		t.Fatalf("shard 1 of 4 holds %d of %d variables", held, len(vars))
	}
	o := PlanOptions{VariablesPerRequest: 10, Shard: shard}
	if got, want := recheckSlots(vars, o), (held+9)/10; got != want {
		t.Errorf("%d slots for the %d variables shard 1 of 4 holds, want %d", got, held, want)
	}
	o.VariablesPerRequest = 0 // 50, the engine's default
	if got, want := recheckSlots(vars, o), (held+49)/50; got != want {
		t.Errorf("%d slots with the default variables per request, want %d", got, want)
	}
}

// A cycle's plan takes its slots' size from the engine's requests: with
// the options the Syncer builds, 1,000 variables at 10 a request fall in
// 100 slots, not in the 20 of the default 50.
func TestACyclesPlanSizesItsRecheckSlotsByTheEnginesRequests(t *testing.T) {
	vars := make([]Variable, 1000)
	for i := range vars {
		vars[i] = Variable{ID: fmt.Sprintf("var%05d", i)}
	}
	s := NewSyncer(nil, nil, Stages{}, nil, SyncOptions{Engine: EngineOptions{VariablesPerRequest: 10}, IdleRecheck: time.Hour}, nil, nil)
	now := time.UnixMilli(1_700_000_000_000)
	if got := recheckSlots(vars, s.planOptions(now, 1)); got != 100 {
		t.Errorf("%d slots for 1,000 variables at 10 a request, want 100", got)
	}
}
