package main

import (
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

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
		zap.Int64("rows_served", sum.RowsServed), zap.Float64("rows_served_per_loaded", round2(sum.RowsServedPerLoaded)),
		zap.Int64("requests_minimum", sum.MinRequests), zap.Float64("requests_per_minimum", round2(sum.RequestsPerMinimum)),
		zap.Int64("count_requests", sum.CountRequests), zap.Int64("reloaded", sum.Reloaded),
	}
	// Each link of the commit chain by its stage: `rollup` for the
	// analyst tables.
	for _, l := range sum.Links {
		fields = append(fields, zap.Duration(l.Stage, l.Took))
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

// round2 keeps two decimals of a ratio for the log.
func round2(x float64) float64 { return math.Round(x*100) / 100 }
