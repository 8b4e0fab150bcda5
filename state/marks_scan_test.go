package state

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/fleetsync/fleetsync/pipeline"
)

// MarksOf hands over the mark of each variable asked for once, as Load
// has it (the greatest of several commits), none of a variable not asked
// for or without a mark, takes a chunk of ids far past max_query_size's
// 256 KiB, and stops at fn's first error.
func TestClickHouseMarksOfHandsEachMarkAsLoadHasIt(t *testing.T) {
	s, _ := newClickHouseStore(t)
	ctx := context.Background()
	for _, ms := range [][]pipeline.Mark{
		{{VariableID: "a", HwmMs: 300, LastActivityMs: 301, CheckedMs: 302}, {VariableID: "b", HwmMs: 5, FutureMs: 9}},
		{{VariableID: "a", HwmMs: 100, LastActivityMs: 7}, {VariableID: "c", HwmMs: 1}},
	} {
		if err := s.Commit(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	want, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 30 000 ids of 40 bytes: 1.2 MB, where the query's text may hold
	// 256 KiB.
	ids := []string{"a", "c"}
	for i := range 30000 {
		ids = append(ids, fmt.Sprintf("unknown-variable-%023d", i))
	}
	got := map[string]pipeline.Mark{}
	if err := s.MarksOf(ctx, ids, func(m pipeline.Mark) error {
		if _, dup := got[m.VariableID]; dup {
			t.Fatalf("MarksOf handed %s twice", m.VariableID)
		}
		got[m.VariableID] = m
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	delete(want, "b")
	if !reflect.DeepEqual(got, want) || len(got) != 2 || got["a"].HwmMs != 300 || got["a"].CheckedMs != 302 {
		t.Fatalf("MarksOf(a, c, ...) gave %+v, Load %+v; want a and c as Load has them, a at 300 with its own read's fields", got, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := s.MarksOf(ctx, []string{"a", "b", "c"}, func(pipeline.Mark) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("MarksOf with a failing fn: %v after %d marks, want its error after 1", err, n)
	}
}
