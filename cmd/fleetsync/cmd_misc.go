package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/fleetsync/fleetsync/config"
	"github.com/fleetsync/fleetsync/pipeline"
)

func cmdMigrate(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync migrate --config FILE")
	cfgPath := fs.String("config", "", "configuration file (YAML)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env, *cfgPath)
	if err != nil {
		return err
	}
	a, err := openApp(ctx, env, cfg, false)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.ch.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "schema of database %s is up to date\n", cfg.ClickHouse.Database)
	return nil
}

func cmdConfigExample(_ context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync config")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprint(env.stdout, config.Example())
	return nil
}

func cmdVersion(_ context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "fleetsync %s (%s)\n", version, goVersion())
	return nil
}

// openForRange is the start that backfill and verify share: the closed
// range of --from and --to, the configuration, and the app with the
// schema ensured and the token read. The caller closes the app.
func openForRange(ctx context.Context, env *cliEnv, cfgPath, fromS, toS string) (a *app, from, to int64, err error) {
	if from, err = parseTime("from", fromS); err != nil {
		return nil, 0, 0, err
	}
	if to, err = parseTime("to", toS); err != nil {
		return nil, 0, 0, err
	}
	if from > to {
		return nil, 0, 0, usagef("--from is after --to; swap them")
	}
	cfg, err := loadConfig(env, cfgPath)
	if err != nil {
		return nil, 0, 0, err
	}
	if a, err = openApp(ctx, env, cfg, true); err != nil {
		return nil, 0, 0, err
	}
	if err = a.ch.Migrate(ctx); err != nil {
		a.Close()
		return nil, 0, 0, fmt.Errorf("ensure schema: %w", err)
	}
	if err = a.refreshToken(); err != nil {
		a.Close()
		return nil, 0, 0, err
	}
	return a, from, to, nil
}

func cmdBackfill(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync backfill --config FILE --from T --to T [--device KEY]...")
	cfgPath := fs.String("config", "", "configuration file (YAML)")
	fromS := fs.String("from", "", "start of the range, inclusive (RFC 3339 or POSIX ms)")
	toS := fs.String("to", "", "end of the range, inclusive (RFC 3339 or POSIX ms)")
	var devices stringList
	fs.Var(&devices, "device", "restrict to this device id or ~label (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, from, to, err := openForRange(ctx, env, *cfgPath, *fromS, *toS)
	if err != nil {
		return err
	}
	defer a.Close()
	stop := a.progress()
	sum, err := a.syncer.Backfill(ctx, from, to, devices)
	stop()
	a.logSummary("backfill", sum, err)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "backfilled %d points of %d variables over %s..%s in %s\n", sum.Points, sum.Targets,
		time.UnixMilli(from).UTC().Format(time.RFC3339), time.UnixMilli(to).UTC().Format(time.RFC3339), sum.Duration.Round(time.Millisecond))
	return failures(sum)
}

type statusRow struct {
	DeviceLabel    string  `json:"device_label"`
	VariableLabel  string  `json:"variable_label"`
	VariableID     string  `json:"variable_id"`
	HwmMs          int64   `json:"hwm_ms"`
	Hwm            string  `json:"hwm,omitempty"`
	LastActivityMs int64   `json:"last_activity_ms"`
	LagSeconds     float64 `json:"lag_seconds"`
}

func cmdStatus(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync status --config FILE [--json] [--limit N]")
	cfgPath := fs.String("config", "", "configuration file (YAML)")
	asJSON := fs.Bool("json", false, "print JSON for machines")
	limit := fs.Int("limit", 50, "show at most N variables, worst lag first (0 = all)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env, *cfgPath)
	if err != nil {
		return err
	}
	a, err := openApp(ctx, env, cfg, false)
	if err != nil {
		return err
	}
	defer a.Close()
	marks, err := a.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("read marks: %w", err)
	}
	// Lag needs each variable's lastActivity: the snapshot of the last cycle.
	vars, err := a.ch.Variables(ctx)
	if err != nil {
		return fmt.Errorf("read variable metadata: %w (run 'fleetsync sync' once first)", err)
	}
	now := time.Now()
	floor := now.Add(-time.Duration(cfg.Source.Retention)).Add(time.Duration(cfg.Source.RetentionMargin)).UnixMilli()
	lags := pipeline.Lag(vars, marks, floor, now.UnixMilli())
	threshold := time.Duration(cfg.Metrics.LagThreshold)
	var maxLag time.Duration
	lagging, marked := 0, 0
	rows := make([]statusRow, 0, len(lags))
	for _, l := range lags {
		maxLag = max(maxLag, l.Lag)
		if l.Lag > threshold {
			lagging++
		}
		r := statusRow{DeviceLabel: l.Variable.DeviceLabel, VariableLabel: l.Variable.Label, VariableID: l.Variable.ID,
			LastActivityMs: l.Variable.LastActivityMs, LagSeconds: l.Lag.Seconds()}
		if l.HasMark {
			marked++
			r.HwmMs = l.Mark.HwmMs
			if l.Mark.HwmMs > 0 {
				r.Hwm = time.UnixMilli(l.Mark.HwmMs).UTC().Format(time.RFC3339)
			}
		}
		rows = append(rows, r)
	}
	if *limit > 0 && len(rows) > *limit {
		rows = rows[:*limit]
	}
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{
			"variables": len(lags), "with_mark": marked, "lagging": lagging, "lag_threshold_seconds": threshold.Seconds(),
			"max_lag_seconds": maxLag.Seconds(), "worst": rows,
		})
	}
	fmt.Fprintf(env.stdout, "%d variables, %d with a mark, %d lagging more than %s, max lag %s\n\n",
		len(lags), marked, lagging, threshold, maxLag.Round(time.Second))
	tw := tabwriter.NewWriter(env.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tVARIABLE\tHIGH-WATER MARK\tLAG")
	for _, r := range rows {
		hwm := r.Hwm
		if hwm == "" {
			hwm = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.DeviceLabel, r.VariableLabel, hwm, (time.Duration(r.LagSeconds * float64(time.Second))).Round(time.Second))
	}
	return tw.Flush()
}
