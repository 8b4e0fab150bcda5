package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

func cmdRun(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync run --config FILE")
	noInitial := fs.Bool("no-initial-cycle", false, "wait for the first scheduled time instead of syncing at start")
	a, err := start(ctx, env, fs, cfgPath, args, true)
	if err != nil {
		return err
	}
	defer a.Close()
	cfg := a.cfg
	sched, err := cron.ParseStandard(cfg.Sync.Schedule)
	if err != nil {
		return usagef("sync.schedule %q: %v; use five cron fields like \"*/5 * * * *\"", cfg.Sync.Schedule, err)
	}
	d := &endpoints{app: a}
	srv, addr, err := d.serve(cfg.Metrics.Listen)
	if err != nil {
		return err
	}
	a.log.Info("fleetsync daemon started", zap.String("schedule", cfg.Sync.Schedule), zap.String("metrics", "http://"+addr+"/metrics"))

	a.runner().Run(ctx, sched, !*noInitial, d.cycle)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	a.log.Info("fleetsync daemon stopped")
	return nil
}

// endpoints is the state `fleetsync run` shares with its HTTP endpoints.
type endpoints struct {
	app        *app
	lastFailed atomic.Bool
	cycles     atomic.Int64
}

// cycle is one scheduled cycle, as the endpoints report it.
func (d *endpoints) cycle(ctx context.Context) {
	err := d.app.syncOnce(ctx)
	d.cycles.Add(1)
	d.lastFailed.Store(err != nil)
	if err != nil {
		d.app.log.Error("cycle failed", zap.Error(err))
	}
}

func (d *endpoints) serve(listen string) (*http.Server, string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.app.reg, promhttp.HandlerOpts{Registry: d.app.reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := d.app.ch.Ping(ctx); err != nil {
			http.Error(w, "clickhouse unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if d.lastFailed.Load() {
			http.Error(w, "the last cycle failed; see the logs", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", usagef("metrics.listen %q: %v; choose a free address", listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.app.log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	return srv, ln.Addr().String(), nil
}
