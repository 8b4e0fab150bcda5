// Package daemon runs sync cycles the way an operator deploys them: one
// cycle under the sync lease (a CronJob's `fleetsync sync`), or cycles on a
// cron schedule until a signal (`fleetsync run`), and stops in order. It
// owns the lease's life (acquire, renew, give up the cycle when it is lost,
// release) and the scheduler's; what a cycle does is the caller's.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Runner runs cycles under the sync lease.
type Runner struct {
	leaser pipeline.Leaser
	holder string
	ttl    time.Duration
	log    *zap.Logger
}

// New returns a Runner that takes the lease from leaser under holder's
// name for ttl at a time. logger may be nil.
func New(leaser pipeline.Leaser, holder string, ttl time.Duration, logger *zap.Logger) *Runner {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Runner{leaser: leaser, holder: holder, ttl: ttl, log: logger}
}

// Once runs work under the lease and releases it afterwards. The lease is
// renewed every third of its ttl while work runs; should another process
// take it over (after it expired), work's context is cancelled with
// pipeline.ErrLeaseLost as its cause, so the cycle loads and commits what
// it fetched and leaves the rest to the new holder.
func (r *Runner) Once(ctx context.Context, work func(ctx context.Context) error) error {
	lease, err := r.leaser.Acquire(ctx, r.holder, r.ttl)
	if err != nil {
		if errors.Is(err, pipeline.ErrLeaseHeld) {
			return fmt.Errorf("%w; another fleetsync is syncing this database: let it finish, or wait until the lease expires", err)
		}
		return fmt.Errorf("acquire the sync lease: %w", err)
	}
	defer func() {
		if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
			r.log.Warn("releasing the sync lease failed; it expires by itself", zap.Error(err))
		}
	}()
	ctx, cancel := context.WithCancelCause(ctx)
	renewed := make(chan struct{})
	go func() { defer close(renewed); r.renew(ctx, lease, cancel) }()
	defer func() { cancel(nil); <-renewed }()
	return work(ctx)
}

// renew keeps the lease until ctx ends, and calls lost when it passed to
// another holder.
func (r *Runner) renew(ctx context.Context, l pipeline.Lease, lost context.CancelCauseFunc) {
	t := time.NewTicker(max(r.ttl/3, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := l.Renew(ctx)
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, pipeline.ErrLeaseLost):
				r.log.Error("the sync lease was taken over by another process; stopping this cycle", zap.Error(err))
				lost(err)
				return
			default:
				r.log.Warn("renewing the sync lease failed; retrying", zap.Error(err))
			}
		}
	}
}

// Run calls cycle on sched until ctx ends, one cycle at a time: a tick that
// comes while a cycle runs is skipped, and the next tick catches up (marks
// make cycles idempotent). initial runs a cycle at once, before the first
// tick. When ctx ends it shuts down in order: the scheduler stops, so no
// cycle starts; the running cycle, which sees ctx cancelled, abandons its
// requests, loads what it fetched and commits its marks; then Run returns.
func (r *Runner) Run(ctx context.Context, sched cron.Schedule, initial bool, cycle func(ctx context.Context)) {
	var running sync.WaitGroup
	job := func() {
		if ctx.Err() != nil {
			return
		}
		running.Add(1)
		defer running.Done()
		cycle(ctx)
	}
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	c.Schedule(sched, cron.FuncJob(job))
	c.Start()
	if initial {
		// Counted before it starts, so that a signal that comes first
		// still waits for it (it then returns at once).
		running.Add(1)
		go func() { defer running.Done(); c.Entries()[0].WrappedJob.Run() }()
	}
	<-ctx.Done()
	r.log.Info("signal received: stopping the scheduler and finishing the current cycle")
	<-c.Stop().Done()
	running.Wait()
}
