package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Tests that kill mutants make mutate found alive in reader.go's shrink:
// what a response too large becomes.

// pointTargets are n variables' windows [1000, 9000].
func pointTargets(n int) []Target {
	var ts []Target
	for i := range n {
		ts = append(ts, Target{Variable: Variable{ID: fmt.Sprintf("v%d", i)}, Start: 1000, End: 9000, From: 1000})
	}
	return ts
}

// shrinkReader is a reader of targets whose one queued request (all of
// them, VariablesPerRequest) has been popped, as a fetcher holds it.
func shrinkReader(t *testing.T, log *zap.Logger, targets []Target) (*reader, *request) {
	t.Helper()
	ctx := context.Background()
	e := NewEngine(nil, nil, nil, EngineOptions{VariablesPerRequest: len(targets)}, nil, log, nil)
	r := newReader(ctx, e, targets, 0, newChunks(4), newCommitter(e, targets))
	req := r.q.pop(ctx)
	if req == nil || len(req.targets) != len(targets) {
		t.Fatalf("popped %+v, want one request for the %d targets", req, len(targets))
	}
	return r, req
}

func TestShrinkReadsAnOpenVariableClosedAndNotesTheFutureAfterItsEnd(t *testing.T) {
	targets := pointTargets(1)
	targets[0].ReadFuture = true
	r, req := shrinkReader(t, nil, targets)
	if !r.shrink(req, errors.New("too large")) {
		t.Fatal("shrink refused an open request of one variable")
	}
	if got := r.byID["v0"].futureMs; got != 9001 {
		t.Errorf("future %d, want 9001: the points after the window's end are left unread", got)
	}
	next := r.q.pop(context.Background())
	if next == nil || next.open || next.start != 1000 || next.end != 9000 {
		t.Errorf("next read %+v, want [1000, 9000] closed", next)
	}
}

func TestTheVariablesPerRequestCapOnlyGoesDownAndIsLoggedWhenItDoes(t *testing.T) {
	cases := []struct {
		name      string
		cap, want int64
		logged    int
	}{
		{"no cap yet: half of the request's variables", 0, 4, 1},
		{"a lower cap stays", 2, 2, 0},
		{"the same cap stays, unlogged", 4, 4, 0},
		{"a higher cap comes down", 6, 4, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			r, req := shrinkReader(t, zap.New(core), pointTargets(8))
			r.varCap.Store(c.cap)
			// Both halves of an earlier split were too large: this is the second.
			req.halves = &splitHalves{}
			req.halves.tooLarge.Store(1)
			r.shrink(req, errors.New("too large"))
			if got := r.varCap.Load(); got != c.want {
				t.Errorf("cap %d, want %d", got, c.want)
			}
			if n := logs.FilterMessageSnippet("fewer variables per request").Len(); n != c.logged {
				t.Errorf("logged %d times, want %d", n, c.logged)
			}
		})
	}
}
