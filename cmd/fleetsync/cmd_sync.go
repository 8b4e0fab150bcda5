package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/daemon"
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
	if err := a.ch.Schema().EnsureSchema(ctx); err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	a.restoreRate(ctx)
	defer a.keepRate(ctx)
	return a.runner().Once(ctx, func(ctx context.Context) error {
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
	})
}

// runner runs this process's cycles under the sync lease.
func (a *app) runner() *daemon.Runner {
	return daemon.New(a.store, pipeline.LeaseHolder(), time.Duration(a.cfg.Sync.LeaseTTL), a.log)
}
