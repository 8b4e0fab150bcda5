// Command fleetbench is fleetsync's performance benchmark (`make bench`). In one
// run on the current machine it measures the physical ceilings and fleetsync
// against them:
//
//  1. the warehouse ceiling: clickhouse-client inserting the same rows from a
//     Native file into the same datapoints schema;
//  2. the source ceiling: fleetsim serving the fleet's raw series to a client
//     that only decodes;
//  3. fleetsync end to end: a first sync (backfill) of ≥ 5 M points by the
//     bin/fleetsync binary under /usr/bin/time, fleetsim in its own process,
//     with the configuration's defaults (a flag that changes them labels the
//     figures tuned), and beside each run the same backfill with
//     sync.rollups off, for what the analyst tables add; and the same
//     comparison on cut frames (`-only cut`, section 3b): a dense backfill
//     of 5 M points, 20,000 per variable, from a fleetsim that cuts each
//     frame of more than the limit at its newest or oldest end at random
//     (--series-cut mixed), so fleetsync proves the cut frames and reads
//     their remainders again;
//  4. memory: a dense backfill of 20 M points (1,000 variables × 20,000),
//     at the defaults, with rows_per_request 50000, and at the defaults
//     on data whose contexts are 5 times larger (fleetsim
//     --context-bytes) and whose `results` come before `columns`
//     (fleetsim --results-first);
//  5. the incremental cycle cost on a fleet of 10 k variables, 1 % of them
//     changed (with and without the analyst tables), and a cycle where
//     nothing changed;
//  6. the Go benchmarks of the decoder and the batch builder on one core;
//  7. the CPU cost of clickhouse.compression: the 5 M backfill with none
//     and with lz4, at the defaults otherwise;
//  8. the analyst queries (`-only rollup`): the README's latest-value and
//     30-day hourly queries on a 22 M-row table, from datapoints FINAL and
//     from the rollups; sections 3 and 5 also report what keeping the
//     rollups costs a backfill and an incremental cycle;
//  9. a rate-limited service (4 requests/s per token, 50 ms latency): a
//     first sync and a 1 %-changed cycle of the 10 k-variable fleet;
//  10. fleet size (`-only fleet`): a first sync and an idle cycle of 10^5
//     and 10^6 variables (2,000 and 20,000 devices × 50, 2 points each):
//     wall time, peak RSS, CPU and the metadata rows written;
//  11. the steady state (`-only steady`, steady.go): the `fleetsync run`
//     daemon against fleetsim with live writers, at the defaults' timing
//     scaled down (-steady-scale), on 24 variables with a dense history
//     and on 10,000 of which 10 % report each cycle: requests, rows served,
//     points loaded and CPU per new point, freshness and duplicates;
//
// plus one profiled in-process sync whose top functions are recorded. Every
// figure is the median of -runs runs with min and max. It prints a table,
// rewrites the generated part of -out (keeping the hand-written sections) and
// prints `requests/minimum: Q`, `rows served/loaded: W` (of the 5 M
// backfill) and `e2e/ceiling: R` (against the best warehouse ceiling) as its
// last lines.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fleetsync/fleetsync/config"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// sizes are the fleets of one benchmark run.
type sizes struct {
	// devices × variables × points of the 5 M backfill; the warehouse and
	// source ceilings use the same fleet.
	devices, vars, points int
	// devices (× vars variables) and points per variable of the memory
	// backfill.
	flatDevices, flatPoints int
	// devices (× vars variables) and points per variable of the backfill
	// whose frames are cut (more points than the default limit).
	cutDevices, cutPoints int
	// incremental fleet: devices × incrVars variables, incrPoints each.
	incrDevices, incrVars, incrPoints int
}

// options are the command-line flags.
type options struct {
	out     string
	quick   bool
	runs    int
	bin     string
	only    map[string]bool
	profile bool
	keep    bool
	tune    tuning
	sizes   sizes
	// fleetMax leaves out the fleet-size section's fleets of more
	// variables (0: none left out).
	fleetMax int
	// steady is the steady-state section's timing and fleets.
	steady steadyOptions
}

// tuning is the sync section fleetsync runs the backfills with: the
// configuration's defaults unless a flag changes them, which labels the
// figures tuned.
type tuning struct {
	RowsPerRequest      int
	VariablesPerRequest int
	MaxInFlight         int
	BatchRows           int
	InsertWorkers       int
	PageSize            int
}

// parts lists the measurements -only accepts, in run order.
var parts = []string{"ceiling", "source", "e2e", "profile", "cut", "flat", "incr", "idle", "ratelimit", "gobench", "compression", "rollup", "fleet", "steady"}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("fleetbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.out, "out", "", "write the report into this Markdown file (its hand-written sections are kept)")
	fs.BoolVar(&o.quick, "quick", false, "smoke test: a tenth of the fleet sizes and one run per figure")
	fs.IntVar(&o.runs, "runs", 0, "runs per figure (default 3, or 1 with -quick)")
	fs.StringVar(&o.bin, "bin", "bin", "directory holding the fleetsync and fleetsim binaries (make build)")
	only := fs.String("only", "", "comma-separated subset of "+strings.Join(parts, ",")+" (default: all)")
	fs.BoolVar(&o.profile, "profile", true, "run one extra in-process sync under the CPU profiler")
	fs.IntVar(&o.fleetMax, "fleet-max", 0, "fleet-size section: leave out fleets of more variables than this (0: measure all)")
	steadyScale := fs.Int("steady-scale", 0, fmt.Sprintf("steady-state section: divide the defaults' schedule, lookback and idle_recheck by this (default %d, or 150 with -quick); the period is rounded to whole seconds", steadyDefaultScale))
	fs.Float64Var(&o.steady.length, "steady-length", steadyDefaultLength, "steady-state section: recheck periods of live writing per fleet")
	fs.BoolVar(&o.keep, "keep", false, "keep the working directory (configs, logs, profiles, Native files)")
	d := config.Default()
	fs.IntVar(&o.tune.RowsPerRequest, "rows-per-request", d.Sync.RowsPerRequest, "sync.rows_per_request of the backfills (the configuration's default)")
	fs.IntVar(&o.tune.VariablesPerRequest, "variables-per-request", d.Sync.VariablesPerRequest, "sync.variables_per_request of the backfills (the configuration's default)")
	fs.IntVar(&o.tune.MaxInFlight, "max-in-flight", d.Sync.MaxInFlight, "sync.max_in_flight of the backfills (the configuration's default)")
	fs.IntVar(&o.tune.BatchRows, "batch-rows", d.Sync.BatchRows, "sync.batch_rows of the backfills (the configuration's default)")
	fs.IntVar(&o.tune.InsertWorkers, "insert-workers", d.Sync.InsertWorkers, "sync.insert_workers of the backfills (the configuration's default)")
	fs.IntVar(&o.tune.PageSize, "page-size", d.Source.PageSize, "source.page_size (list requests) (the configuration's default)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; fleetbench takes flags only (see -help)", fs.Arg(0))
	}
	if o.runs == 0 {
		o.runs = 3
		if o.quick {
			o.runs = 1
		}
	}
	if o.runs < 1 {
		return nil, fmt.Errorf("-runs %d: need at least 1", o.runs)
	}
	o.only = map[string]bool{}
	if *only == "" {
		for _, p := range parts {
			o.only[p] = true
		}
	} else {
		for _, p := range strings.Split(*only, ",") {
			p = strings.TrimSpace(p)
			if !contains(parts, p) {
				return nil, fmt.Errorf("-only %q: unknown part; choose from %s", p, strings.Join(parts, ","))
			}
			o.only[p] = true
		}
	}
	if !o.profile {
		delete(o.only, "profile")
	}
	if *steadyScale == 0 {
		*steadyScale = steadyDefaultScale
		if o.quick {
			*steadyScale = 150
		}
	}
	if *steadyScale < 1 || *steadyScale > int(defaultPeriod/time.Second) {
		return nil, fmt.Errorf("-steady-scale %d: want 1 to %d (a period of at least a second)", *steadyScale, int(defaultPeriod/time.Second))
	}
	if o.steady.length <= 0 {
		return nil, fmt.Errorf("-steady-length %v: want more than 0", o.steady.length)
	}
	o.steady.period = (defaultPeriod / time.Duration(*steadyScale)).Round(time.Second)
	o.steady.shapes = steadyShapes(o.quick)
	o.sizes = sizes{devices: 125, vars: 4, points: 10000, flatDevices: 250, flatPoints: 20000, cutDevices: 63, cutPoints: 20000, incrDevices: 2500, incrVars: 4, incrPoints: 20}
	if o.quick {
		o.sizes = sizes{devices: 13, vars: 4, points: 10000, flatDevices: 25, flatPoints: 20000, cutDevices: 7, cutPoints: 20000, incrDevices: 250, incrVars: 4, incrPoints: 20}
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "fleetbench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := newBench(ctx, o, stdout, stderr, args)
	if err != nil {
		fmt.Fprintln(stderr, "fleetbench:", err)
		return 1
	}
	err = b.measure(ctx)
	b.close()
	if err != nil {
		fmt.Fprintln(stderr, "fleetbench:", err)
	}
	// The ratios are the last lines, whatever failed, so scripts can read
	// them.
	fmt.Fprintf(stdout, "requests/minimum: %s\n", b.medianText("requests-per-minimum"))
	fmt.Fprintf(stdout, "rows served/loaded: %s\n", b.medianText("served-per-loaded"))
	fmt.Fprintf(stdout, "e2e/ceiling: %s\n", ratioText(b.ratio()))
	if err != nil {
		return 1
	}
	return 0
}
