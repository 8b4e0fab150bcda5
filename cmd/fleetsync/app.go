package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fleetsync/fleetsync/config"
	"github.com/fleetsync/fleetsync/extract/fleet"
	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
	"github.com/fleetsync/fleetsync/state"
)

// app is everything a command needs, wired from the configuration. Only
// cmd knows every package.
type app struct {
	cfg     *config.Config
	log     *zap.Logger
	reg     *prometheus.Registry
	metrics *pipeline.Metrics
	tokens  fleetapi.TokenSource
	api     *fleetapi.Client
	src     *fleet.Source
	ch      *clickhouse.Client
	store   stateStore
	syncer  *pipeline.Syncer
	// rateRestored, rateKey and rateSaved follow the request rate kept
	// in the state store (ratestate.go).
	rateRestored bool
	rateKey      string
	rateSaved    fleetapi.LearnedRate
	// loaded counts acknowledged points for the progress line, shown when
	// stderr is a terminal (interactive).
	loaded      atomic.Int64
	interactive bool
	stderr      io.Writer
}

// stateStore is a pipeline.StateStore that can also lease the sync and
// keep the learned request rate.
type stateStore interface {
	pipeline.StateStore
	pipeline.Leaser
	rateStore
}

func loadConfig(env *cliEnv, path string) (*config.Config, error) {
	if path == "" {
		return nil, usagef("--config FILE is required (print an example with 'fleetsync config')")
	}
	cfg, err := config.Load(path, env.environ)
	if err != nil {
		return nil, &usageError{err}
	}
	return cfg, nil
}

func newLogger(cfg config.LogConfig, w io.Writer) (*zap.Logger, error) {
	var level zapcore.Level
	if err := level.UnmarshalText([]byte(cfg.Level)); err != nil {
		return nil, usagef("log.level %q: use debug, info, warn or error", cfg.Level)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	format := cfg.Format
	if format == "auto" || format == "" {
		format = "json"
		if isTerminal(w) {
			format = "console"
		}
	}
	if format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	// Lines come from many goroutines (the fetchers, the loaders, the API
	// client's retries); the writer may be any io.Writer, so it is locked.
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level)), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// openApp wires the clients. withSource false skips the API client (for
// commands that only read the warehouse).
func openApp(ctx context.Context, env *cliEnv, cfg *config.Config, withSource bool) (*app, error) {
	log, err := newLogger(cfg.Log, env.stderr)
	if err != nil {
		return nil, err
	}
	log = shardLogger(log, cfg.Sync)
	a := &app{cfg: cfg, log: log, reg: prometheus.NewRegistry(), interactive: isTerminal(env.stderr), stderr: env.stderr}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleetsync_build_info", Help: "Build of the running fleetsync; always 1."}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(version, goVersion()).Set(1)
	a.reg.MustRegister(buildInfo)
	if err := registerShardInfo(a.reg, cfg.Sync); err != nil {
		return nil, err
	}
	if a.metrics, err = pipeline.NewMetrics(a.reg); err != nil {
		return nil, err
	}
	// The schedule's period feeds the "no recent success" alert; a CronJob
	// runs on the same schedule as the daemon would (config validated it).
	if sched, err := cron.ParseStandard(cfg.Sync.Schedule); err == nil {
		next := sched.Next(time.Now())
		a.metrics.SetScheduleInterval(sched.Next(next).Sub(next).Seconds())
	}

	password := cfg.ClickHouse.Password.Reveal()
	if cfg.ClickHouse.PasswordFile != "" {
		b, err := os.ReadFile(cfg.ClickHouse.PasswordFile)
		if err != nil {
			return nil, usagef("clickhouse.password_file: %v; check the path and the file's permissions", err)
		}
		password = strings.TrimSpace(string(b))
	}
	chTLS, err := clickhouseTLS(cfg.ClickHouse, log)
	if err != nil {
		return nil, err
	}
	a.ch, err = clickhouse.Open(ctx, clickhouse.Config{
		Addr:          cfg.ClickHouse.Addr,
		Database:      cfg.ClickHouse.Database,
		Username:      cfg.ClickHouse.Username,
		Password:      password,
		TablePrefix:   cfg.ClickHouse.TablePrefix,
		DialTimeout:   time.Duration(cfg.ClickHouse.DialTimeout),
		InsertTimeout: time.Duration(cfg.ClickHouse.InsertTimeout),
		MaxElapsed:    time.Duration(cfg.ClickHouse.RetryMaxElapsed),
		MaxOpenConns:  cfg.Sync.InsertWorkers + clickhouse.RollupConns,
		Compression:   cfg.ClickHouse.Compression,
		TLS:           chTLS,
		Cluster:       cfg.ClickHouse.Cluster,
		ZookeeperPath: cfg.ClickHouse.ZookeeperPath,
	}, log.Named("clickhouse"), a.reg)
	if err != nil {
		var ce *clickhouse.ConfigError
		if errors.As(err, &ce) {
			return nil, &usageError{err}
		}
		return nil, fmt.Errorf("%w (check clickhouse.addr and that the server is running)", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, time.Duration(cfg.ClickHouse.DialTimeout)+5*time.Second)
	err = a.ch.Ping(pingCtx)
	cancel()
	var tlsErr *clickhouse.TLSError
	if errors.As(err, &tlsErr) {
		a.ch.Close()
		return nil, &usageError{err}
	}
	if err != nil {
		a.ch.Close()
		return nil, fmt.Errorf("clickhouse at %s is unreachable: %v; check clickhouse.addr, the credentials and that the server is running%s", strings.Join(cfg.ClickHouse.Addr, ","), err, tlsHint(cfg.ClickHouse))
	}
	switch cfg.State.Backend {
	case config.BackendFile:
		st := state.NewFile(cfg.State.Path)
		st.SetLease(shardOfConfig(cfg.Sync).LeaseName())
		a.store = st
	default:
		st := state.NewClickHouse(a.ch)
		st.SetLease(shardOfConfig(cfg.Sync).LeaseName())
		a.store = st
	}
	if withSource {
		if cfg.Source.TokenFile != "" {
			a.tokens = fleetapi.FileToken(cfg.Source.TokenFileFor(cfg.Sync.ShardIndex))
		} else {
			a.tokens = fleetapi.StaticToken(cfg.Source.Token.Reveal())
		}
		srcTLS, err := sourceTLS(cfg.Source)
		if err != nil {
			a.Close()
			return nil, err
		}
		proxy, ignored := sourceProxy(env.environ)
		if ignored != "" && strings.HasPrefix(cfg.Source.BaseURL, "http://") {
			log.Warn(ignored + " is ignored: a plain-HTTP proxy would receive the API token in clear; use an https source.base_url, which goes through HTTPS_PROXY in a TLS tunnel")
		}
		// The API client waits as the retry table says (pipeline/retries.go),
		// within the configured budget; BackoffMax also caps its waits after a
		// 420 (quota.go), so it comes from the same row.
		apiRetry := pipeline.APIRetry(time.Duration(cfg.Source.RetryMaxElapsed))
		a.api, err = fleetapi.New(fleetapi.Config{
			BaseURL:           cfg.Source.BaseURL,
			Tokens:            a.tokens,
			Timeout:           time.Duration(cfg.Source.Timeout),
			RequestsPerSecond: cfg.Source.RequestsPerSecond,
			StartRate:         cfg.Source.InitialRequestsPerSecond,
			MaxElapsed:        apiRetry.MaxElapsed,
			BackoffInitial:    apiRetry.Initial,
			BackoffMax:        apiRetry.Max,
			Backoff:           func() backoff.BackOff { return apiRetry.NewBackOff() },
			UserAgent:         "fleetsync/" + version,
			PageSize:          cfg.Source.PageSize,
			TLS:               srcTLS,
			Proxy:             proxy,
		}, log.Named("api"), a.reg)
		if err != nil {
			a.Close()
			return nil, &usageError{err}
		}
		a.src = fleet.New(a.api, fleet.Options{
			// The config's validation admits only auto and per_device.
			PerDeviceVariables: cfg.Source.VariablesListing == config.VariablesPerDevice,
			MaxInFlight:        cfg.Sync.MaxInFlight,
			Logger:             log.Named("sync"),
		})
		// Every cycle of shard 0 refreshes every metadata table (devices,
		// variables; groups and organizations once sync.metadata_refresh
		// has passed since this process last listed them) and syncs the
		// configured events' logs, whose marks live in the warehouse
		// whatever state.backend is.
		var stages pipeline.Stages
		if shardOfConfig(cfg.Sync).WritesMetadata() {
			stages.Metadata = metadata.NewRefresh(a.src, a.ch.Metadata(), metadata.RefreshOptions{
				MaxInFlight: cfg.Sync.MaxInFlight,
				ListEvery:   time.Duration(cfg.Sync.MetadataRefresh),
			}, log.Named("metadata"))
		}
		if len(cfg.Sync.Events) > 0 && shardOfConfig(cfg.Sync).WritesMetadata() {
			stages.Events = metadata.NewEventSync(a.src, a.ch.Metadata(), state.NewClickHouse(a.ch), metadata.EventOptions{Events: cfg.Sync.Events}, log.Named("metadata"))
		}
		// The settled watermark lives in the warehouse beside the data it
		// describes, whatever state.backend is.
		stages.Watermark = state.NewClickHouse(a.ch)
		a.syncer = pipeline.NewSyncer(a.src, a.ch.Points(), stages, a.store, a.syncOptions(), log.Named("sync"), a.metrics)
	}
	return a, nil
}

func (a *app) syncOptions() pipeline.SyncOptions {
	c := a.cfg
	o := pipeline.SyncOptions{
		Engine: pipeline.EngineOptions{
			RowsPerRequest:      c.Sync.RowsPerRequest,
			VariablesPerRequest: c.Sync.VariablesPerRequest,
			MaxInFlight:         c.Sync.MaxInFlight,
			BatchRows:           c.Sync.BatchRows,
			BatchBytes:          c.Sync.BatchBytes,
			BatchAge:            time.Duration(c.Sync.BatchAge),
			InsertWorkers:       c.Sync.InsertWorkers,
			Progress:            &a.loaded,
		},
		Retention:    time.Duration(c.Source.Retention),
		Margin:       time.Duration(c.Source.RetentionMargin),
		Lookback:     time.Duration(c.Sync.Lookback),
		SkipIdle:     c.Sync.SkipIdle,
		IdleRecheck:  time.Duration(c.Sync.IdleRecheck),
		Shard:        shardOfConfig(c.Sync),
		LagThreshold: time.Duration(c.Metrics.LagThreshold),
		Scope: pipeline.Scope{
			Devices:       c.Sync.Devices,
			Tags:          c.Sync.DeviceTags,
			Groups:        c.Sync.DeviceGroups,
			Organizations: c.Sync.Organizations,
		},
	}
	// The API counts points, which proves a cut frame whole instead of
	// reading it again (pipeline/density.go).
	if a.src != nil {
		o.Engine.Counts = a.src
	}
	// The commit chain: every shard keeps the analyst tables of its own
	// variables, recomputed before their marks are written (the engine
	// puts the mark rule and the state store last).
	if c.Sync.Rollups && a.ch != nil {
		o.Engine.Links = append(o.Engine.Links, analyst.Link(a.ch.AnalystTables()))
	}
	return o
}

// refreshToken re-reads a token file before a cycle, so that a rotated
// Kubernetes secret is picked up without waiting for a 401.
func (a *app) refreshToken() error {
	if f, ok := a.tokens.(*fleetapi.TokenFile); ok {
		if err := f.Refresh(); err != nil {
			return fmt.Errorf("source.token_file: %w", err)
		}
	}
	return nil
}

// Close keeps the learned request rate and releases the connections.
func (a *app) Close() {
	a.keepRate(context.Background())
	if a.ch != nil {
		_ = a.ch.Close()
	}
	_ = a.log.Sync()
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
