package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

type statusRow struct {
	DeviceLabel    string  `json:"device_label"`
	VariableLabel  string  `json:"variable_label"`
	VariableID     string  `json:"variable_id"`
	HwmMs          int64   `json:"hwm_ms"`
	Hwm            string  `json:"hwm,omitempty"`
	LastActivityMs int64   `json:"last_activity_ms"`
	LagSeconds     float64 `json:"lag_seconds"`
	// Shard is the index of the shard that syncs the variable.
	Shard int `json:"shard"`
}

func cmdStatus(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync status --config FILE [--json] [--limit N]")
	asJSON := fs.Bool("json", false, "print JSON for machines")
	limit := fs.Int("limit", 50, "show at most N variables, worst lag first (0 = all)")
	a, err := start(ctx, env, fs, cfgPath, args, false)
	if err != nil {
		return err
	}
	defer a.Close()
	cfg := a.cfg
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
			LastActivityMs: l.Variable.LastActivityMs, LagSeconds: l.Lag.Seconds(),
			Shard: shardOf(l.Variable.ID, cfg.Sync.ShardCount)}
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
			"max_lag_seconds": maxLag.Seconds(), "worst": rows, "shard_count": cfg.Sync.ShardCount,
		})
	}
	fmt.Fprintf(env.stdout, "%d variables, %d with a mark, %d lagging more than %s, max lag %s\n\n",
		len(lags), marked, lagging, threshold, maxLag.Round(time.Second))
	if sharded(cfg.Sync) {
		shardSummary(env.stdout, lags, cfg.Sync.ShardCount, threshold)
		fmt.Fprintln(env.stdout)
	}
	tw := tabwriter.NewWriter(env.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tVARIABLE\tHIGH-WATER MARK\tLAG\tSHARD")
	for _, r := range rows {
		hwm := r.Hwm
		if hwm == "" {
			hwm = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", r.DeviceLabel, r.VariableLabel, hwm, (time.Duration(r.LagSeconds * float64(time.Second))).Round(time.Second), r.Shard)
	}
	return tw.Flush()
}
