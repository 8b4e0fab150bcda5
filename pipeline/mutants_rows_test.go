package pipeline

import (
	"slices"
	"testing"
)

// Tests that kill mutants make mutate found alive in rows.go: the bounds a
// span gives the commit chain (Done's range), the chunk's size bound, and frames the
// request did not ask for.

// testSink is a frameSink for a request of the given variables over
// [0, 1000], outside any reader's run.
func testSink(ids ...string) *frameSink {
	req := &request{start: 0, end: 1000}
	for _, id := range ids {
		req.targets = append(req.targets, &targetState{Target: Target{Variable: Variable{ID: id}}, start: 0, end: 1000})
	}
	return &frameSink{r: &reader{out: newChunks(1)}, req: req, chunk: new(Batch), limit: 100}
}

func TestFrameSinkSpansBoundTheirRowsWhateverTheServedOrder(t *testing.T) {
	s := testSink("a", "b")
	for i, frame := range [][]int64{{20, 10, 30}, {50, 60, 40}} {
		for _, ts := range frame {
			if err := s.Point(i, Point{TsMs: ts}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.EndFrame(i, len(frame)); err != nil {
			t.Fatal(err)
		}
	}
	want := []Span{{VariableID: "a", Rows: 3, MinTsMs: 10, MaxTsMs: 30}, {VariableID: "b", Rows: 3, MinTsMs: 40, MaxTsMs: 60}}
	if !slices.Equal(s.chunk.Spans, want) {
		t.Errorf("spans %+v, want %+v", s.chunk.Spans, want)
	}
}

func TestFrameSinkRejectsFramesTheRequestDidNotAskFor(t *testing.T) {
	s := testSink("a", "b")
	for _, i := range []int{-1, 2} {
		if err := s.Point(i, Point{TsMs: 10}); err == nil {
			t.Errorf("Point of frame %d of a request for 2 variables: no error", i)
		}
		if err := s.EndFrame(i, 0); err == nil {
			t.Errorf("EndFrame of frame %d of a request for 2 variables: no error", i)
		}
	}
}

func TestAChunkIsFullAtItsRowsOrItsBytesExactly(t *testing.T) {
	rows := func(n int) *Batch { return &Batch{TsMs: make([]int64, n)} }
	cases := []struct {
		name string
		b    *Batch
		want bool
	}{
		{"a row short of the rows bound", rows(maxChunkRows - 1), false},
		{"at the rows bound", rows(maxChunkRows), true},
		{"a byte short of the bytes bound", &Batch{Bytes: maxChunkBytes - 1}, false},
		{"at the bytes bound", &Batch{Bytes: maxChunkBytes}, true},
	}
	for _, c := range cases {
		if got := full(c.b); got != c.want {
			t.Errorf("%s: full = %v, want %v", c.name, got, c.want)
		}
	}
}
