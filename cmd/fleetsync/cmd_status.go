package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
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
	vars, err := a.ch.Readback().Variables(ctx)
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
			Shard: pipeline.ShardOf(l.Variable.ID, cfg.Sync.ShardCount)}
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
	rates, err := keptRates(ctx, a.store)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{
			"variables": len(lags), "with_mark": marked, "lagging": lagging, "lag_threshold_seconds": threshold.Seconds(),
			"max_lag_seconds": maxLag.Seconds(), "worst": rows, "shard_count": cfg.Sync.ShardCount,
			"request_rates": rates,
		})
	}
	fmt.Fprintf(env.stdout, "%d variables, %d with a mark, %d lagging more than %s, max lag %s\n\n",
		len(lags), marked, lagging, threshold, maxLag.Round(time.Second))
	printRates(env.stdout, rates, now)
	if shardOfConfig(cfg.Sync).Sharded() {
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

// rateRow is a request rate kept in the state store, as status shows it.
type rateRow struct {
	// Key is the source and a fingerprint of the token (never the token).
	Key       string     `json:"key"`
	PerSecond float64    `json:"requests_per_second"`
	Limited   bool       `json:"limited"`
	Limit     float64    `json:"limit_estimate,omitempty"`
	LearnedAt *time.Time `json:"learned_at,omitempty"`
	SavedAt   time.Time  `json:"saved_at"`
	// Text says it in words, as the text output does.
	Text string `json:"text"`
}

// keptRates are the request rates the state store keeps, by key.
func keptRates(ctx context.Context, st rateStore) ([]rateRow, error) {
	kept, err := st.Rates(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the kept request rates: %w", err)
	}
	rows := make([]rateRow, 0, len(kept))
	for key, r := range kept {
		row := rateRow{Key: key, PerSecond: r.PerSecond, Limited: r.Limited, Limit: r.Limit, SavedAt: r.SavedAt,
			Text: fleetapi.LearnedRate{PerSecond: r.PerSecond, Limited: r.Limited, Limit: r.Limit}.String()}
		if !r.LearnedAt.IsZero() {
			at := r.LearnedAt
			row.LearnedAt = &at
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b rateRow) int { return b.SavedAt.Compare(a.SavedAt) })
	return rows, nil
}

// printRates writes the request rates a next run starts from.
func printRates(w io.Writer, rates []rateRow, now time.Time) {
	if len(rates) == 0 {
		fmt.Fprintf(w, "request rate: nothing learned yet; the next run starts cautiously (source.initial_requests_per_second)\n\n")
		return
	}
	for _, r := range rates {
		learned := "no 429 yet"
		if r.LearnedAt != nil {
			learned = "learned from 429s " + ago(now, *r.LearnedAt)
		}
		fmt.Fprintf(w, "request rate for %s: %s; %s, saved %s\n", r.Key, r.Text, learned, ago(now, r.SavedAt))
	}
	fmt.Fprintln(w)
}

// ago says how long before now t was, with t itself.
func ago(now, t time.Time) string {
	return fmt.Sprintf("%s ago (%s)", now.Sub(t).Round(time.Second), t.UTC().Format(time.RFC3339))
}
