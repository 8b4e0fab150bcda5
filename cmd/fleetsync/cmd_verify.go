package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/verify"
)

func cmdVerify(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync verify --config FILE --from T --to T [--json] [--repair]")
	fromS := fs.String("from", "", "start of the range, inclusive (RFC 3339 or POSIX ms); moved up to the retention floor if older")
	toS := fs.String("to", "", "end of the range, inclusive (RFC 3339 or POSIX ms)")
	asJSON := fs.Bool("json", false, "print JSON for machines")
	repair := fs.Bool("repair", false, "re-extract the mismatching variables over the range, then verify them again")
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
	_, vars, err := a.src.Walk(ctx, a.syncOptions().Scope)
	if err != nil {
		return fmt.Errorf("list the in-scope variables: %w", err)
	}
	v := verify.New(a.src, a.ch, verify.Options{PerRequest: a.cfg.Sync.VariablesPerRequest, InFlight: a.cfg.Sync.MaxInFlight}, a.log.Named("verify"))
	rep, err := v.Verify(ctx, vars, start, end)
	if err != nil {
		return err
	}
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
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := printReport(env.stdout, rep); err != nil {
		return err
	}
	return verifyResult(rep)
}

func msText(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// remaining are the variables that disagree at the end: after the repair
// when there was one.
func remaining(r *verify.Report) []verify.Mismatch {
	if r.Repair != nil {
		return r.Repair.Remaining
	}
	return r.Mismatches
}

// printReport prints the report for people: the mismatches, then a summary.
func printReport(w io.Writer, r *verify.Report) error {
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
			return printMismatches(w, r.Repair.Remaining)
		}
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
func verifyResult(r *verify.Report) error {
	left := remaining(r)
	if len(left) == 0 {
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
