package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/config"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/state"
)

func goVersion() string { return runtime.Version() }

func cmdSync(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync sync --config FILE")
	cfgPath := fs.String("config", "", "configuration file (YAML)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env, *cfgPath)
	if err != nil {
		return err
	}
	a, err := openApp(ctx, env, cfg, true)
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

// progress prints a progress line every second while a cycle or backfill
// runs, when stderr is a terminal (logs to a file or a collector get the
// summary only). The returned func stops it.
func (a *app) progress() (stop func()) {
	if !a.interactive {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(a.stderr, "\r\033[K")
				return
			case <-t.C:
				n := a.loaded.Load()
				rate := float64(n) / time.Since(start).Seconds()
				fmt.Fprintf(a.stderr, "\r\033[Kloaded %d points (%.0f/s), %s", n, rate, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-finished }
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

func failures(sum pipeline.Summary) error {
	if len(sum.Failed) == 0 {
		return nil
	}
	return &failedError{fmt.Sprintf("%d of %d variables failed (first: %v; next step: %s); their marks are unchanged and the next cycle retries them, the others' progress is kept",
		len(sum.Failed), sum.Targets, sum.Failed[0], nextStep(sum.Failed[0].Err))}
}

func (a *app) logSummary(what string, sum pipeline.Summary, err error) {
	fields := []zap.Field{
		zap.Int("devices", sum.Devices), zap.Int("variables", sum.Variables), zap.Int("read", sum.Targets),
		zap.Int("idle", sum.Skipped), zap.Int64("points", sum.Points), zap.Int64("requests", sum.Requests),
		zap.Int64("splits", sum.Splits), zap.Int("failed", len(sum.Failed)), zap.Duration("duration", sum.Duration),
		zap.Duration("lag_max", sum.LagMax), zap.Int("lagging", sum.Lagging),
	}
	if !sum.FloorMovedTo.IsZero() {
		fields = append(fields, zap.Time("retention_floor_moved_to", sum.FloorMovedTo))
	}
	for i, f := range sum.Failed {
		if i == 10 {
			a.log.Error("more variables failed", zap.Int("count", len(sum.Failed)-10))
			break
		}
		a.log.Error("variable failed", zap.String("device", f.Variable.DeviceLabel), zap.String("variable", f.Variable.Label),
			zap.String("variable_id", f.Variable.ID), zap.String("window", msRange(f.Start, f.End)), zap.Error(f.Err),
			zap.String("next_step", nextStep(f.Err)))
	}
	switch {
	case err != nil:
		a.log.Error(what+" failed", append(fields, zap.Error(err))...)
	case len(sum.Failed) > 0:
		a.log.Warn(what+" finished with failures", fields...)
	default:
		a.log.Info(what+" finished", fields...)
	}
}

// push sends the metrics to the Pushgateway when one is configured. A failed
// push is logged and never turns a good sync into a failed one.
//
// It pushes with POST, which replaces only the metric families it sends. A
// failed run leaves out fleetsync_last_success_timestamp_seconds, so the
// Pushgateway keeps the time of the last run that did succeed and the
// "no recent success" alert measures from it, as it does for the daemon.
func (a *app) push(succeeded bool) {
	u := a.cfg.Metrics.PushgatewayURL
	if u == "" {
		return
	}
	instance := a.cfg.Metrics.Instance
	if instance == "" {
		instance = hostname()
	}
	var g prometheus.Gatherer = a.reg
	if !succeeded {
		g = withoutFamily(a.reg, "fleetsync_last_success_timestamp_seconds")
	}
	p := push.New(u.Reveal(), a.cfg.Metrics.Job).Gatherer(g).Grouping("instance", instance)
	if err := p.Add(); err != nil {
		a.log.Warn("pushing metrics to the Pushgateway failed; the sync result stands", zap.String("pushgateway", u.String()), zap.Error(redactErr(err, u)))
	}
}

// withoutFamily gathers g less one metric family.
func withoutFamily(g prometheus.Gatherer, name string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if mf.GetName() != name {
				out = append(out, mf)
			}
		}
		return out, err
	})
}

// redactErr keeps the Pushgateway's credentials out of an error message.
func redactErr(err error, u config.SecretURL) error {
	return errors.New(strings.ReplaceAll(err.Error(), u.Reveal(), u.String()))
}
