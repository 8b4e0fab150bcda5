package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/state"
)

func cmdSync(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync sync --config FILE")
	a, err := start(ctx, env, fs, cfgPath, args, true)
	if err != nil {
		return err
	}
	defer a.Close()
	err = a.syncOnce(ctx)
	a.push(err == nil)
	return err
}

// syncOnce is one cycle under the lease, with the schema ensured first.
func (a *app) syncOnce(ctx context.Context) error {
	if err := a.ch.Migrate(ctx); err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	lease, err := a.store.Acquire(ctx, leaseHolder(), time.Duration(a.cfg.Sync.LeaseTTL))
	if err != nil {
		var held *state.LeaseHeldError
		if errors.As(err, &held) {
			return fmt.Errorf("%w; another fleetsync is syncing this database: let it finish, or wait until the lease expires", err)
		}
		return fmt.Errorf("acquire the sync lease: %w", err)
	}
	defer func() {
		if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
			a.log.Warn("releasing the sync lease failed; it expires by itself", zap.Error(err))
		}
	}()
	// Losing the lease (another process took it over after it expired)
	// stops the cycle: what was loaded is committed, the rest is left to the
	// new holder.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go a.renewLease(ctx, lease, cancel)

	if err := a.refreshToken(); err != nil {
		return err
	}
	stop := a.progress()
	sum, err := a.syncer.Cycle(ctx)
	stop()
	a.logSummary("cycle", sum, err)
	if err != nil {
		return fmt.Errorf("%w; next step: %s", err, nextStep(err))
	}
	return failures(sum)
}

func (a *app) renewLease(ctx context.Context, l state.Lease, lost context.CancelCauseFunc) {
	ttl := time.Duration(a.cfg.Sync.LeaseTTL)
	t := time.NewTicker(max(ttl/3, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := l.Renew(ctx)
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, state.ErrLeaseLost):
				a.log.Error("the sync lease was taken over by another process; stopping this cycle", zap.Error(err))
				lost(err)
				return
			default:
				a.log.Warn("renewing the sync lease failed; retrying", zap.Error(err))
			}
		}
	}
}
