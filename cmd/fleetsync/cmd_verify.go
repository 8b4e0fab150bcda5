package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/verify"
)

func cmdVerify(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync verify --config FILE --from T --to T [--json] [--repair]")
	fromS := fs.String("from", "", "start of the range, inclusive (RFC 3339 or POSIX ms); moved up to the retention floor if older")
	toS := fs.String("to", "", "end of the range, inclusive (RFC 3339 or POSIX ms)")
	asJSON := fs.Bool("json", false, "print JSON for machines")
	repair := fs.Bool("repair", false, "re-extract the mismatching variables over the range and rewrite the analyst tables' rows that differ, then verify them again")
	a, from, to, err := startForRange(ctx, env, fs, cfgPath, args, fromS, toS)
	if err != nil {
		return err
	}
	defer a.Close()
	// Every request stays inside retention (plus the sync's margin) and
	// before now, so the service never rejects the range.
	now := time.Now()
	floor := a.syncer.Floor(now)
	start, end := max(from, floor), min(to, now.UnixMilli())
	if start > end {
		return usagef("the range %s..%s lies before the retention window (which starts at %s) or in the future",
			msText(from), msText(to), msText(floor))
	}
	_, vars, err := pipeline.WalkAll(ctx, a.src, a.syncOptions().Scope)
	if err != nil {
		return fmt.Errorf("list the in-scope variables: %w", err)
	}
	v := verify.New(a.src, a.ch.Readback(), verify.Options{PerRequest: a.cfg.Sync.VariablesPerRequest, InFlight: a.cfg.Sync.MaxInFlight}, a.log.Named("verify"))
	vrep, err := v.Verify(ctx, vars, start, end)
	if err != nil {
		return err
	}
	rep := &report{Report: vrep}
	rep.RequestedFrom, rep.RequestedTo = from, to
	if *repair && len(rep.Mismatches) > 0 {
		bad := make([]pipeline.Variable, len(rep.Mismatches))
		for i, m := range rep.Mismatches {
			bad[i] = m.Variable
		}
		sum, err := a.syncer.BackfillVariables(ctx, bad, start, end)
		a.logSummary("repair", sum, err)
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		after, err := v.Verify(ctx, bad, start, end)
		if err != nil {
			return fmt.Errorf("verify after the repair: %w", err)
		}
		rep.Repair = &verify.RepairReport{Variables: len(bad), Points: sum.Points, Failed: len(sum.Failed), Remaining: after.Mismatches}
	}
	if a.cfg.Sync.Rollups {
		tables := a.ch.AnalystTables()
		rr, err := tables.CheckRollups(ctx, start, end)
		if err != nil {
			return fmt.Errorf("check the analyst tables: %w", err)
		}
		if *repair && len(rr.Diffs) > 0 {
			if err := tables.RepairRollups(ctx, rr.Diffs); err != nil {
				return fmt.Errorf("repair the analyst tables: %w; nothing already loaded is lost, run the same repair again", err)
			}
			after, err := tables.CheckRollups(ctx, start, end)
			if err != nil {
				return fmt.Errorf("check the analyst tables after the repair: %w", err)
			}
			rr.Repaired, rr.Remaining = len(rr.Diffs), after.Diffs
			if rr.Remaining == nil {
				rr.Remaining = []clickhouse.TableDiff{}
			}
		}
		rep.Rollups = &rr
	}
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := printReport(env.stdout, rep); err != nil {
		return err
	}
	if repaired := rep.Repair != nil || (rep.Rollups != nil && rep.Rollups.Repaired > 0); repaired {
		note := env.stdout
		if *asJSON {
			note = env.stderr
		}
		a.noteWatermark(ctx, note, "the repair", start)
	}
	return verifyResult(rep)
}

// report is what `fleetsync verify` prints: the check of the points,
// and of the analyst tables when they are kept (flattened into one JSON
// object).
type report struct {
	*verify.Report
	Rollups *clickhouse.TablesReport `json:"rollups,omitempty"`
}

// rollupsLeft are the analyst tables' rows that differ at the end: after
// the repair when there was one.
func rollupsLeft(r *report) []clickhouse.TableDiff {
	switch {
	case r.Rollups == nil:
		return nil
	case r.Rollups.Remaining != nil:
		return r.Rollups.Remaining
	}
	return r.Rollups.Diffs
}

// printRollups prints the analyst tables' check: the rows that differ (the
// first 50), then a summary.
func printRollups(w io.Writer, r *clickhouse.TablesReport, from, to int64) error {
	show := func(ds []clickhouse.TableDiff) error {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TABLE\tVARIABLE\tHOUR\tPROBLEM")
		for i, d := range ds {
			if i == 50 {
				fmt.Fprintf(tw, "...\t%d more\t\t\n", len(ds)-50)
				break
			}
			hour := "-"
			if d.Table != "datapoints_latest" {
				hour = msText(d.HourMs)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Table, d.VariableID, hour, d.Problem)
		}
		return tw.Flush()
	}
	if len(r.Diffs) > 0 {
		fmt.Fprintln(w)
		if err := show(r.Diffs); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "analyst tables over the hours of %s..%s: %d hourly and %d latest rows expected, %d rows differ from datapoints FINAL\n",
		msText(from), msText(to), r.Hours, r.Latest, len(r.Diffs))
	if r.Remaining != nil {
		fmt.Fprintf(w, "analyst tables repair: rewrote %d rows; %d still differ\n", r.Repaired, len(r.Remaining))
		if len(r.Remaining) > 0 {
			return show(r.Remaining)
		}
	}
	return nil
}

func msText(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// remaining are the variables that disagree at the end: after the repair
// when there was one.
func remaining(r *report) []verify.Mismatch {
	if r.Repair != nil {
		return r.Repair.Remaining
	}
	return r.Mismatches
}

// printReport prints the report for people: the mismatches, then a summary.
func printReport(w io.Writer, r *report) error {
	if len(r.Mismatches) > 0 {
		if err := printMismatches(w, r.Mismatches); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	clamped := ""
	if r.FromMs != r.RequestedFrom || r.ToMs != r.RequestedTo {
		clamped = " (clamped to the retention window and now)"
	}
	fmt.Fprintf(w, "verified %d variables over %s..%s%s: %d match, %d mismatch (source numbers: %d by aggregation, %d by single statistics)\n",
		r.Variables, msText(r.FromMs), msText(r.ToMs), clamped, r.Matched, len(r.Mismatches), r.ViaAggregation, r.ViaStatistics)
	if r.Repair != nil {
		fmt.Fprintf(w, "repair: re-extracted %d variables (%d points, %d failed); %d still mismatch\n",
			r.Repair.Variables, r.Repair.Points, r.Repair.Failed, len(r.Repair.Remaining))
		if len(r.Repair.Remaining) > 0 {
			fmt.Fprintln(w)
			if err := printMismatches(w, r.Repair.Remaining); err != nil {
				return err
			}
		}
	}
	if r.Rollups != nil {
		return printRollups(w, r.Rollups, r.FromMs, r.ToMs)
	}
	return nil
}

func printMismatches(w io.Writer, ms []verify.Mismatch) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tVARIABLE\tSOURCE COUNT\tWAREHOUSE COUNT\tSOURCE SUM\tWAREHOUSE SUM\tWAREHOUSE FIRST..LAST")
	for _, m := range ms {
		span := "-"
		if m.WarehouseCount > 0 {
			span = msText(m.WarehouseMinTsMs) + ".." + msText(m.WarehouseMaxTsMs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.10g\t%.10g\t%s\n", m.DeviceLabel, m.VariableLabel, m.SourceCount, m.WarehouseCount, m.SourceSum, m.WarehouseSum, span)
	}
	return tw.Flush()
}

// verifyResult is the command's error: exit 1 while any variable
// disagrees.
func verifyResult(r *report) error {
	left := remaining(r)
	if len(left) == 0 {
		if diffs := rollupsLeft(r); len(diffs) > 0 {
			hint := "run 'fleetsync verify --repair' with the same range to rewrite them"
			if r.Rollups.Remaining != nil {
				hint = "the repair did not fix them (a latest row of a variable with no point left cannot be removed)"
			}
			d := diffs[0]
			return &failedError{fmt.Sprintf("%d rows of the analyst tables differ from datapoints FINAL over %s..%s (first: %s %s %s); %s",
				len(diffs), msText(r.FromMs), msText(r.ToMs), d.Table, d.VariableID, d.Problem, hint)}
		}
		return nil
	}
	first := left[0]
	hint := "run 'fleetsync verify --repair' with the same range to re-extract them"
	if r.Repair != nil {
		hint = "re-extraction did not fix them; the warehouse may hold points the source no longer has"
	}
	return &failedError{fmt.Sprintf("%d of %d variables disagree with the source over %s..%s (first: %s/%s source %d points, warehouse %d); %s",
		len(left), r.Variables, msText(r.FromMs), msText(r.ToMs), first.DeviceLabel, first.VariableLabel, first.SourceCount, first.WarehouseCount, hint)}
}
