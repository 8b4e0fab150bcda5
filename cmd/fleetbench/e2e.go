package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// syncConfig is the fleetsync configuration of one benchmark database.
func (b *bench) syncConfig(path, baseURL, db string, rowsPerRequest int, syncExtra ...string) error {
	t := b.o.tune
	extra := ""
	for _, l := range syncExtra {
		extra += "  " + l + "\n"
	}
	return b.writeConfig(path, baseURL, db, configLines{source: fmt.Sprintf("  page_size: %d\n", t.PageSize), sections: fmt.Sprintf(`sync:
  rows_per_request: %d
  variables_per_request: %d
  max_in_flight: %d
  batch_rows: %d
  insert_workers: %d
%s`, rowsPerRequest, t.VariablesPerRequest, t.MaxInFlight, t.BatchRows, t.InsertWorkers, extra)})
}

// configLines are what a benchmark sets in a fleetsync configuration
// beyond the source, the ClickHouse database and the logs; each is whole
// lines, ending in a newline, or empty.
type configLines struct {
	source     string // in the source section, below base_url and token
	sections   string // whole sections after the source (sync, say)
	clickhouse string // in the clickhouse section, below addr and database
}

// writeConfig writes a fleetsync configuration at path for the benchmark
// database db on the bench's ClickHouse, with the defaults but for what the
// benchmark must set.
func (b *bench) writeConfig(path, baseURL, db string, l configLines) error {
	cfg := fmt.Sprintf(`source:
  base_url: %s
  token: %s
%s%sclickhouse:
  addr: ["%s"]
  database: %s
%smetrics:
  listen: "127.0.0.1:0"
log:
  level: info
  format: json
`, baseURL, token, l.source, l.sections, b.ch.Addr(), db, l.clickhouse)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write fleetsync config: %w", err)
	}
	return nil
}

// cycleLog is the summary line `fleetsync sync` logs at the end of a cycle.
type cycleLog struct {
	Msg      string  `json:"msg"`
	Points   int64   `json:"points"`
	Requests int64   `json:"requests"`
	Read     int     `json:"read"`
	Idle     int     `json:"idle"`
	Failed   int     `json:"failed"`
	Splits   int64   `json:"splits"`
	Duration float64 `json:"duration"`
	// Rollup is the time the cycle spent recomputing the rollups.
	Rollup float64 `json:"rollup"`
	// The density-aware reads' report (pipeline.Summary).
	RequestsMinimum     int64   `json:"requests_minimum"`
	RequestsPerMinimum  float64 `json:"requests_per_minimum"`
	RowsServed          int64   `json:"rows_served"`
	RowsServedPerLoaded float64 `json:"rows_served_per_loaded"`
	CountRequests       int64   `json:"count_requests"`
	Reloaded            int64   `json:"reloaded"`
}

// parseCycleLog finds the cycle summary in a fleetsync JSON log.
func parseCycleLog(path string) (cycleLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return cycleLog{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var found *cycleLog
	for sc.Scan() {
		var l cycleLog
		if json.Unmarshal(sc.Bytes(), &l) == nil && strings.HasPrefix(l.Msg, "cycle finished") {
			found = &l
		}
	}
	if found == nil {
		return cycleLog{}, fmt.Errorf("no `cycle finished` line in %s: %s", path, tail(path, 800))
	}
	return *found, nil
}

// syncResult is one measured `fleetsync sync`.
type syncResult struct {
	usage
	log    cycleLog
	rows   int64 // rows in datapoints afterwards
	chCPU  float64
	simCPU float64
}

// runSync runs `bin/fleetsync sync --config cfg` as its own process under
// /usr/bin/time and attributes the ClickHouse and fleetsim CPU of the
// interval to it.
func (b *bench) runSync(ctx context.Context, name, cfg string, sim *simProc, db string) (syncResult, error) {
	var r syncResult
	// A hung sync must not hang the benchmark; the largest one takes under
	// a minute here.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	logPath := filepath.Join(b.dir, name+".log")
	chCPU, simCPU := startCPU(b.chPID), startCPU(sim.pid())
	u, err := measured(ctx, b.useTime, b.dir, logPath, filepath.Join(b.o.bin, "fleetsync"), "sync", "--config", cfg)
	r.usage = u
	r.chCPU, r.simCPU = chCPU.stop(), simCPU.stop()
	if err != nil {
		return r, err
	}
	if u.exitCode != 0 {
		return r, fmt.Errorf("fleetsync sync exited %d: %s", u.exitCode, tail(logPath, 1500))
	}
	if r.log, err = parseCycleLog(logPath); err != nil {
		return r, err
	}
	// FINAL: a cut frame's edge rows are loaded twice, and the table keeps
	// one of each point.
	if r.rows, err = b.count(ctx, db+".datapoints FINAL"); err != nil {
		return r, err
	}
	return r, nil
}

// cutSimFlags are the fleetsim flags of the cut backfill: a frame of more
// than the limit keeps its newest or its oldest points, at random per
// frame. Its rows come in fleetsim's default order, newest first: serving
// them oldest first or shuffled changed nothing the reads do (on the 5 M
// fleet of 20,000 points per variable, the same 28 raw-series requests,
// 17 or 18 counts and 240 rows read twice with each order).
var cutSimFlags = []string{"--series-cut", "mixed"}

// largeContextBytes is the size of every context in the memory section's
// backfill of large contexts: fleetsim's own are {} or a position's ~32
// bytes, so this is 5 times its longest (16 times its average).
const largeContextBytes = 160

// largeContextFlags and resultsFirstFlags are the fleetsim flags of the
// memory section's other data shapes: contexts several times larger, and
// `results` before `columns` (which a client must hold until it knows the
// columns). Each grew fleetsync's memory before issue 26 bounded it by
// bytes: the dense 20 M backfill peaked at 390 and 452 MiB.
var (
	largeContextFlags = []string{"--context-bytes", fmt.Sprint(largeContextBytes)}
	resultsFirstFlags = []string{"--results-first"}
)

// backfillStage measures the first sync (backfill) of a fleet into a fresh
// database per run by the fleetsync binary.
type backfillStage struct {
	b   *bench
	tag string
	// points per variable; the memory and cut stages start their own
	// fleetsim, of devices devices with simFlags added to its flags.
	points   int
	ownSim   bool
	devices  int
	simFlags []string
	sim      *simProc
	// bare runs the same backfill with sync.rollups off beside each run,
	// for what the analyst tables add.
	bare bool
	// rpr is sync.rows_per_request when set (a tuned run); the
	// configuration's default otherwise.
	rpr     int
	want    int64
	sec     *section
	noteRun bool

	rate, rss, wall, cpu, chCPU, simCPU, parts, others, rollup, rollupShare *figure
	perMinimum, served                                                      *figure
	// With bare only: the same backfill with sync.rollups off, run beside
	// each, and what the analyst tables add to its wall time.
	wallBare, extra, extraShare *figure
	// The CPU the tables add, fleetsync's and the server's: a wall-time
	// difference of two runs is noisy on a shared machine, CPU much less.
	cpuExtra, cpuExtraShare *figure
}

func (st *backfillStage) prepare(ctx context.Context) error {
	b := st.b
	s := b.o.sizes
	vars := s.devices * s.vars
	var err error
	devices := s.devices
	if st.ownSim {
		devices = st.devices
		vars = devices * s.vars
		if b.sim != nil {
			b.sim.stop()
			b.sim = nil
		}
		st.sim, err = startSim(ctx, filepath.Join(b.o.bin, "fleetsim"), append(simArgs(devices, s.vars, st.points, "30d"), st.simFlags...)...)
		if err == nil {
			b.logf("fleetsim pid %d on %s: %d devices × %d variables × %d points %s", st.sim.pid(), st.sim.url, devices, s.vars, st.points, strings.Join(st.simFlags, " "))
		}
	} else {
		st.sim, err = b.fleet5M(ctx)
	}
	if err != nil {
		return err
	}
	// The one variable fleetsim leaves empty holds no points; the others'
	// extra points lie outside retention.
	st.want = int64(vars-1) * int64(st.points)
	t := b.o.tune
	tuned := b.tuned()
	if st.rpr == 0 {
		st.rpr = t.RowsPerRequest
	} else {
		tuned = true
	}
	config := fmt.Sprintf("Configuration: the defaults (`sync.rows_per_request: %d`, `variables_per_request: %d`, `max_in_flight: %d`, `batch_rows: %d`, `insert_workers: %d`, `source.page_size: %d`).",
		st.rpr, t.VariablesPerRequest, t.MaxInFlight, t.BatchRows, t.InsertWorkers, t.PageSize)
	if tuned {
		config = "**Tuned** " + strings.Replace(config, "the defaults", "not the defaults", 1)
	}
	switch st.tag {
	case "e2e":
		st.sec = b.section(fmt.Sprintf("3. fleetsync end to end: first sync (backfill) of %d variables × %d points over 30 d", vars, st.points))
		st.sec.note("`%s sync --config FILE` under `%s`, fleetsim (`%s`) in its own process, a fresh database per run (dropped afterwards). Rows/s = rows in `datapoints FINAL` afterwards (checked equal to the distinct points fleetsync reports and to the fleet's (variables − 1 empty) × points) / wall time of the whole process (schema check, metadata, extract, load, commit). The runs alternate with the ceilings' runs, so background load hits both alike.",
			filepath.Join(b.o.bin, "fleetsync"), map[bool]string{true: "/usr/bin/time -v", false: "wait4 rusage"}[b.useTime], filepath.Join(b.o.bin, "fleetsim"))
		st.sec.note("%s", config)
	case "cut":
		st.sec = b.section(fmt.Sprintf("3b. fleetsync end to end on cut frames: a dense backfill of %d variables × %d points over 30 d, fleetsim `%s`", vars, st.points, strings.Join(st.simFlags, " ")))
		st.sec.note("What the analyst tables cost a backfill whose frames are cut and read again. Every variable holds more points than the default limit, so each one's first frame comes back cut; fleetsim keeps its newest or its oldest `limit` points at random per frame (`--series-cut mixed`; rows newest first, its default order), and fleetsync proves with counts what each cut frame holds, then reads the rest of its window again (rows of a cut frame outside the window its count proved are loaded twice). Otherwise as section 3: the same binaries and configuration, a fresh database per run.")
		st.sec.note("%s", config)
	case "flat":
		st.sec = b.section(fmt.Sprintf("4. Memory: a dense backfill of %d variables × %d points", vars, st.points))
		st.sec.note("%s", config)
		st.sec.note("Twice the variables and twice the points per variable of the 5 M backfill: every frame of the default limit comes back cut, so the memory the reads keep for a cut frame shows here.")
	case "flatctx":
		st.sec = b.section(fmt.Sprintf("4c. Memory: the same backfill with contexts 5 times larger, fleetsim `%s`", strings.Join(st.simFlags, " ")))
		st.sec.note("%s", config)
		st.sec.note("Every context padded to %d bytes (fleetsim's are `{}` or a position's ~32 bytes): whatever grew with the rows' size would show here.", largeContextBytes)
	case "flatfirst":
		st.sec = b.section(fmt.Sprintf("4d. Memory: the same backfill with `results` before `columns`, fleetsim `%s`", strings.Join(st.simFlags, " ")))
		st.sec.note("%s", config)
		st.sec.note("The client holds `results` until the `columns` arrive, at most 8 MiB a response (`fleetapi.MaxHeldResults`); a larger one is read again in smaller requests, hence more requests.")
	default:
		st.sec = b.section(fmt.Sprintf("4b. Memory: the same backfill with `rows_per_request: %d`", st.rpr))
		st.sec.note("%s", config)
		st.sec.note("A limit above the points per variable: whole series come back in one frame each, so whatever grew with the response size would show here.")
	}
	st.rate = st.sec.fig("e2e-"+st.tag, "end to end, points loaded / wall time", "rows/s", 0)
	st.rss = st.sec.fig("rss-"+st.tag, "peak RSS of fleetsync", "MiB", 0)
	st.wall = st.sec.fig("", "wall time of `fleetsync sync`", "s", 2)
	st.cpu = st.sec.fig("", "fleetsync CPU (user+sys) per million points", "CPU-s", 2)
	st.chCPU = st.sec.fig("", "clickhouse-server CPU per million points", "CPU-s", 2)
	st.simCPU = st.sec.fig("", "fleetsim CPU per million points", "CPU-s", 2)
	st.parts = st.sec.fig("", "parts written by the INSERTs (level 0)", "parts", 0)
	st.others = st.sec.fig("", "CPU used by other processes meanwhile", "cores", 2)
	st.rollup = st.sec.fig("", "time spent recomputing the rollups (datapoints_latest, datapoints_hourly)", "s", 2)
	st.rollupShare = st.sec.fig("rollup-"+st.tag, "rollup time / wall time", "%", 1)
	if st.bare {
		st.wallBare = st.sec.fig("", "wall time of the same backfill with `sync.rollups: false`", "s", 2)
		st.extra = st.sec.fig("", "wall time the analyst tables add (with them − without)", "s", 2)
		st.extraShare = st.sec.fig("rollup-extra-"+st.tag, "wall time the analyst tables add / wall time with them", "%", 1)
		st.cpuExtra = st.sec.fig("", "CPU the analyst tables add (fleetsync + clickhouse-server, with them − without)", "CPU-s", 2)
		st.cpuExtraShare = st.sec.fig("", "CPU the analyst tables add / fleetsync + clickhouse-server CPU with them", "%", 1)
		st.sec.note("The rollup time is the committer's time in the rollups, which overlaps the loads; what keeping the tables costs a backfill is the wall time they add, measured against the same backfill with `sync.rollups: false`, run beside each (a fresh database, the same fleetsim), the pairs alternating which goes first. Wall time on two shared cores varies by a second from run to run, so the CPU they add (fleetsync's and the server's, the server's from its /proc counters over the run) is shown beside it.")
	}
	st.perMinimum = st.sec.fig(st.tagged("requests-per-minimum"), "raw-series requests / the minimum the limit allows", "×", 2)
	st.served = st.sec.fig(st.tagged("served-per-loaded"), "rows served by fleetsim / points loaded", "×", 2)
	return nil
}

// tagged names a figure of the 5 M backfill plainly, the others' by tag.
func (st *backfillStage) tagged(name string) string {
	if st.tag == "e2e" {
		return name
	}
	return name + "-" + st.tag
}

func (st *backfillStage) run(ctx context.Context, r int) error {
	b := st.b
	db := fmt.Sprintf("bench_%s_%d", st.tag, r+1)
	cfg := filepath.Join(b.dir, db+".yaml")
	if err := b.syncConfig(cfg, st.sim.url, db, st.rpr); err != nil {
		return err
	}
	// The pairs alternate which run goes first: on this machine runs get
	// faster as the server's memory warms up, so a pair that always ran
	// the tables first would charge them for the warm-up.
	var bare, bareCPU float64
	bareFirst := st.wallBare != nil && r%2 == 1
	if bareFirst {
		var err error
		if bare, bareCPU, err = st.runBare(ctx, r); err != nil {
			return err
		}
	}
	b.quiesce(ctx)
	machine := startMachineCPU()
	res, err := b.runSync(ctx, db, cfg, st.sim, db)
	busy := machine.stop()
	var parts int64
	if err == nil {
		parts, err = b.insertedParts(ctx, db)
	}
	mp, err := b.settle(ctx, db, res, err, st.want)
	if err != nil {
		return err
	}
	own := res.user + res.sys
	others := max(0, busy-own-res.chCPU-res.simCPU)
	st.rate.add(float64(res.rows) / res.wall.Seconds())
	st.rss.add(float64(res.maxRSS) / (1 << 20))
	st.wall.add(res.wall.Seconds())
	st.cpu.add(own / mp)
	st.chCPU.add(res.chCPU / mp)
	st.simCPU.add(res.simCPU / mp)
	st.parts.add(float64(parts))
	st.others.add(others / res.wall.Seconds())
	st.rollup.add(res.log.Rollup)
	st.rollupShare.add(100 * res.log.Rollup / res.wall.Seconds())
	if res.log.RequestsPerMinimum > 0 { // a fleetsync that reports them
		st.perMinimum.add(res.log.RequestsPerMinimum)
		st.served.add(res.log.RowsServedPerLoaded)
	}
	b.logf("%s run %d: %d points in %.2fs (cycle %.2fs, %d requests of minimum %d, %d counts, %d splits, rows served/loaded %.2f): %.0f rows/s, peak RSS %.0f MiB, CPU %.1fs user + %.1fs sys, clickhouse %.1fs, fleetsim %.1fs, others %.1fs",
		st.tag, r+1, res.rows, res.wall.Seconds(), res.log.Duration, res.log.Requests, res.log.RequestsMinimum, res.log.CountRequests, res.log.Splits, res.log.RowsServedPerLoaded, float64(res.rows)/res.wall.Seconds(),
		float64(res.maxRSS)/(1<<20), res.user, res.sys, res.chCPU, res.simCPU, others)
	if st.wallBare != nil {
		if !bareFirst {
			if bare, bareCPU, err = st.runBare(ctx, r); err != nil {
				return err
			}
		}
		st.wallBare.add(bare)
		st.extra.add(res.wall.Seconds() - bare)
		st.extraShare.add(100 * (res.wall.Seconds() - bare) / res.wall.Seconds())
		withCPU := own + res.chCPU
		st.cpuExtra.add(withCPU - bareCPU)
		st.cpuExtraShare.add(100 * (withCPU - bareCPU) / withCPU)
		b.logf("%s run %d without the analyst tables: %.2fs (they add %.2fs and %.2f CPU-s of fleetsync and clickhouse)", st.tag, r+1, bare, res.wall.Seconds()-bare, withCPU-bareCPU)
	}
	if !st.noteRun {
		st.noteRun = true
		st.sec.note("%d points per run in %d raw-series requests (the minimum `rows_per_request` allows: %d; %d splits of cut frames) and %d count requests that proved full frames whole; fleetsim served %d rows; %d rows of cut frames were loaded and then read again.",
			res.rows, res.log.Requests, res.log.RequestsMinimum, res.log.Splits, res.log.CountRequests, res.log.RowsServed, res.log.Reloaded)
	}
	return nil
}

// runBare runs the backfill with sync.rollups off and returns its wall
// time in seconds and the CPU-s of fleetsync and the server.
func (st *backfillStage) runBare(ctx context.Context, r int) (wall, cpu float64, err error) {
	b := st.b
	db := fmt.Sprintf("bench_%s_bare_%d", st.tag, r+1)
	cfg := filepath.Join(b.dir, db+".yaml")
	if err := b.syncConfig(cfg, st.sim.url, db, st.rpr, "rollups: false"); err != nil {
		return 0, 0, err
	}
	b.quiesce(ctx)
	res, err := b.runSync(ctx, db, cfg, st.sim, db)
	if _, err := b.settle(ctx, db, res, err, st.want); err != nil {
		return 0, 0, err
	}
	return res.wall.Seconds(), res.user + res.sys + res.chCPU, nil
}

func (st *backfillStage) finish(context.Context) {
	if st.ownSim {
		st.sim.stop()
	}
}
