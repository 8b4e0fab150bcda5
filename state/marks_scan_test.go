package state

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/fleetsync/fleetsync/pipeline"
)

// ScanMarks hands over each variable's mark once, as Load has it (the
// greatest of several commits), and stops at fn's first error.
func TestClickHouseScanMarksHandsEachMarkAsLoadHasIt(t *testing.T) {
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
	got := map[string]pipeline.Mark{}
	if err := s.ScanMarks(ctx, func(m pipeline.Mark) error {
		if _, dup := got[m.VariableID]; dup {
			t.Fatalf("ScanMarks handed %s twice", m.VariableID)
		}
		got[m.VariableID] = m
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(got) != 3 || got["a"].HwmMs != 300 || got["a"].CheckedMs != 302 {
		t.Fatalf("ScanMarks gave %+v, Load %+v; want the same three marks, a at 300 with its own read's fields", got, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := s.ScanMarks(ctx, func(pipeline.Mark) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("ScanMarks with a failing fn: %v after %d marks, want its error after 1", err, n)
	}
}
