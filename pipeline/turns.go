package pipeline

import (
	"context"
	"fmt"
)

// The goroutines of a run (its own, a fetcher per MaxInFlight, a loader
// per InsertWorkers and the committer) hand work to each other through the
// request queue, the chunks' channel, the committer's lock and timers.
// Each takes its turn (EngineOptions.Turns) as it starts and each time it
// goes on after waiting for another goroutine or for time, before it
// touches anything another one shares; and none holds a lock across a call
// to a port (the retention floor's search lock is a channel for that
// reason). In the product a turn is nothing. In the deterministic
// simulation (sim_sched_test.go) it is where the scheduler parks the
// goroutine until the seed picks it: a goroutine that another one woke
// waits there, so one goroutine of the run acts at a time and the seed
// chooses the whole interleaving.

// turnKey is the context key of a goroutine's turn.
type turnKey struct{}

// named is ctx carrying the turn of the goroutine called role (and i, when
// there are several of that role); ctx itself without Turns.
func (e *Engine) named(ctx context.Context, role string, i int) context.Context {
	if e.opts.Turns == nil {
		return ctx
	}
	name := role
	if i >= 0 {
		name = fmt.Sprintf("%s %d", role, i)
	}
	return context.WithValue(ctx, turnKey{}, e.opts.Turns(name))
}

// turnOf is the turn ctx carries, nil when none.
func turnOf(ctx context.Context) func() {
	t, _ := ctx.Value(turnKey{}).(func())
	return t
}

// turn takes the turn ctx carries, if any.
func turn(ctx context.Context) {
	if t := turnOf(ctx); t != nil {
		t()
	}
}
