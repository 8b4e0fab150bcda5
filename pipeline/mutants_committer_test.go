package pipeline

import "testing"

// Tests that kill mutants make mutate found alive in committer.go: the
// smallest acknowledged timestamp whatever the order of the acks.

func TestCommitterHandsOnTheSmallestLoadedTimestampWhateverTheAckOrder(t *testing.T) {
	// A mark ahead of the clock: its lookback lies past the cycle's end, so
	// the plan re-reads the lookback before now, below From, and the range
	// loaded starts at the smallest point loaded.
	e := NewEngine(nil, nil, nil, EngineOptions{}, nil, nil, nil)
	c := newCommitter(e, []Target{{Variable: Variable{ID: "a"}, Start: 1000, End: 9000, From: 50_000}})
	c.ack([]Span{{VariableID: "a", Rows: 3, MinTsMs: 1100, MaxTsMs: 1300}}, nil)
	c.ack([]Span{{VariableID: "a", Rows: 2, MinTsMs: 2000, MaxTsMs: 2500}}, nil)
	c.ack([]Span{{VariableID: "a", Rows: 1, MinTsMs: 1500, MaxTsMs: 1500}}, nil)
	c.readEnded(readEnd{id: "a", start: 1000, spans: 3})
	if len(c.done) != 1 || c.done[0].MinTs != 1100 || c.done[0].MaxTs != 2500 || c.done[0].Points != 6 {
		t.Fatalf("done %+v, want a's 6 points over [1100, 2500]", c.done)
	}
}
