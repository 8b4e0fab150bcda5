package pipeline

import "testing"

// Tests that kill mutants make mutate found alive in marks.go: the
// comparisons of the never-backwards rule and of a backfill's join.

func TestMergeMarkKeepsTheFurtherMarkAndAtEqualMarksTheLaterReadWithTheGreaterReread(t *testing.T) {
	mark := func(hwm, checked, la int64) Mark {
		return Mark{VariableID: "v", HwmMs: hwm, CheckedMs: checked, LastActivityMs: la}
	}
	owing := func(m Mark, reread int64) Mark {
		m.RereadMs, m.LookbackMs = reread, 3_600_000
		return m
	}
	under := func(m Mark, lookback int64) Mark {
		m.LookbackMs = lookback
		return m
	}
	cases := []struct {
		name        string
		stored      Mark
		ok          bool
		given, want Mark
	}{
		{"nothing stored: the given mark", Mark{}, false, mark(100, 10, 1), mark(100, 10, 1)},
		{"nothing stored, a zero stored value aside: the given mark", mark(500, 50, 1), false, mark(100, 10, 2), mark(100, 10, 2)},
		{"stored further ahead: kept", mark(200, 10, 1), true, mark(100, 99, 2), mark(200, 10, 1)},
		{"given further ahead: replaces", mark(100, 99, 1), true, mark(200, 10, 2), mark(200, 10, 2)},
		{"equal marks, stored read later: kept", mark(100, 20, 1), true, mark(100, 10, 2), mark(100, 20, 1)},
		{"equal marks, given read later: replaces", mark(100, 10, 1), true, mark(100, 20, 2), mark(100, 20, 2)},
		{"equal marks read at once: the given one, whole", mark(100, 10, 1), true, mark(100, 10, 2), mark(100, 10, 2)},
		{"stored ahead, the given one's debt paid further: kept, with the greater reread", owing(mark(200, 10, 1), 50), true, owing(mark(100, 99, 2), 80), owing(mark(200, 10, 1), 80)},
		{"given ahead, the stored one's debt paid further: replaces, with the greater reread", owing(mark(100, 99, 1), 80), true, owing(mark(200, 10, 2), 50), owing(mark(200, 10, 2), 80)},
		{"given ahead and its debt paid further: the given one, whole", owing(mark(100, 99, 1), 50), true, owing(mark(200, 10, 2), 80), owing(mark(200, 10, 2), 80)},
		{"nothing stored: the given mark's own reread", owing(mark(500, 50, 1), 90), false, owing(mark(100, 10, 2), 30), owing(mark(100, 10, 2), 30)},
		{"debts under two lookbacks: the winner's, stored", under(owing(mark(200, 10, 1), 50), 7_200_000), true, owing(mark(100, 99, 2), 80), under(owing(mark(200, 10, 1), 50), 7_200_000)},
		{"debts under two lookbacks: the winner's, given", owing(mark(100, 99, 1), 80), true, under(owing(mark(200, 10, 2), 50), 7_200_000), under(owing(mark(200, 10, 2), 50), 7_200_000)},
		// Under two lookbacks, a loser's debt at or above the winner's
		// for every reader (windowFrom: the debt, less how much the
		// reader's lookback exceeds its own) stands with its lookback;
		// one above it for some readers only leaves the winner's.
		{"a debt above the winner's for every reader, under a shorter lookback: the loser's, with its lookback", under(owing(mark(200, 10, 1), 50), 2*3_600_000), true, owing(mark(100, 99, 2), 3_600_000+80), owing(mark(200, 10, 1), 3_600_000+80)},
		{"a debt above the winner's for some readers only, under a shorter lookback: the winner's", under(owing(mark(200, 10, 1), 50), 2*3_600_000), true, owing(mark(100, 99, 2), 3_600_000+20), under(owing(mark(200, 10, 1), 50), 2*3_600_000)},
		{"a debt above the winner's for every reader, under a longer lookback: the loser's, with its lookback", owing(mark(100, 99, 1), 80), true, under(owing(mark(200, 10, 2), 50), 1_800_000), owing(mark(200, 10, 2), 80)},
		{"a debt under no known lookback: the winner's", under(owing(mark(100, 99, 1), 80), 0), true, under(owing(mark(200, 10, 2), 50), 0), under(owing(mark(200, 10, 2), 50), 0)},
	}
	for _, c := range cases {
		if got := MergeMark(c.stored, c.ok, c.given); got != c.want {
			t.Errorf("%s: MergeMark(%+v, %v, %+v) = %+v, want %+v", c.name, c.stored, c.ok, c.given, got, c.want)
		}
	}
}

func TestBackfillMarkMovesOnlyWhereTheBackfillJoinedUpAndOnlyForwards(t *testing.T) {
	const floor, lookback = 1000, 100
	target := func(start int64, hasMark bool, hwm int64) Target {
		tg := Target{Variable: Variable{ID: "v"}, Start: start, End: 9000, HasMark: hasMark}
		if hasMark {
			tg.Mark = Mark{VariableID: "v", HwmMs: hwm, CheckedMs: 8000, LastActivityMs: 7}
		}
		return tg
	}
	owing := func(tg Target, reread int64) Target {
		tg.Mark.RereadMs = reread
		return tg
	}
	cases := []struct {
		name  string
		t     Target
		maxTs int64
		moves bool
	}{
		{"no mark, read from the floor exactly", target(floor, false, 0), 5000, true},
		{"no mark, read from after the floor", target(floor+1, false, 0), 5000, false},
		{"a mark that loaded nothing, read from the floor", target(floor, true, 0), 5000, true},
		{"read from the mark's lookback exactly", target(4900, true, 5000), 6000, true},
		{"read from a millisecond after the mark's lookback", target(4901, true, 5000), 6000, false},
		{"read from the mark's lookback, above what it owes", owing(target(4900, true, 5000), 4000), 6000, false},
		{"read from what the mark owes exactly", owing(target(4000, true, 5000), 4000), 6000, true},
		{"loaded up to the mark exactly", target(floor, true, 5000), 5000, false},
		{"loaded a millisecond past the mark", target(floor, true, 5000), 5001, true},
	}
	for _, c := range cases {
		m, ok := BackfillMark(floor, lookback)(c.t, Outcome{MaxTs: c.maxTs})
		if ok && c.t.Mark.HwmMs <= 0 && m.RereadMs != c.t.Start {
			t.Errorf("%s: reread %d, want the backfill's start %d (a mark that loaded nothing owes from where the read began)", c.name, m.RereadMs, c.t.Start)
		}
		if ok != c.moves {
			t.Errorf("%s: mark moved %v (%+v), want %v", c.name, ok, m, c.moves)
			continue
		}
		if ok && (m.HwmMs != c.maxTs || m.CheckedMs != c.t.Mark.CheckedMs || m.LastActivityMs != c.t.Mark.LastActivityMs) {
			t.Errorf("%s: mark %+v, want hwm %d and the cycle's read position kept", c.name, m, c.maxTs)
		}
	}
}
