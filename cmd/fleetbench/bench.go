package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

var nan = math.NaN()

// token is the API token fleetsim accepts in every benchmark.
const token = "bench-token"

// clientBinary is Debian's ClickHouse client.
const clientBinary = "/usr/bin/clickhouse-client"

// bench is one benchmark run: the ClickHouse server it started, its working
// directory, and the sections measured so far.
type bench struct {
	o       *options
	stdout  io.Writer
	stderr  io.Writer
	args    []string
	dir     string
	ch      *chserver.Server
	chPort  string
	chPID   int
	useTime bool
	began   time.Time
	machine []string // "what: value" lines
	secs    []*section
	// sim is the fleetsim process serving the 5 M fleet, shared by the
	// source ceiling, the end-to-end runs and the profiled run.
	sim *simProc
	// profileTop is the `go tool pprof -top` output of the profiled run.
	profileTop, profileCum, profileAlloc, profileInuse string
	profileNote                                        string

	// incrChanged is the number of variables changed before each
	// incremental cycle.
	incrChanged int
	// steady holds the steady-state section's results, for the targets.
	steady []steadyResult
}

func newBench(ctx context.Context, o *options, stdout, stderr io.Writer, args []string) (*bench, error) {
	b := &bench{o: o, stdout: stdout, stderr: stderr, args: args, began: time.Now()}
	for _, name := range []string{"fleetsync", "fleetsim"} {
		p := filepath.Join(o.bin, name)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s: %w; build it first with `make build` (make bench does)", p, err)
		}
	}
	if _, err := os.Stat(clientBinary); err != nil {
		return nil, fmt.Errorf("%s: %w; install Debian's clickhouse-client (make deps)", clientBinary, err)
	}
	b.useTime = haveGNUTime()
	if !b.useTime {
		b.logf("%s (GNU time) is missing: install it with `apt-get install -y time`; measuring peak RSS and CPU from the kernel's wait4 rusage instead (the same numbers time reports)", timeBinary)
	}
	dir, err := os.MkdirTemp("", "fleetbench-")
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	b.dir = dir
	b.logf("working directory %s", dir)
	srv, err := chserver.Start(ctx, chserver.Options{})
	if err != nil {
		b.close()
		return nil, fmt.Errorf("start clickhouse-server: %w", err)
	}
	b.ch = srv
	b.chPID = srv.PID()
	_, b.chPort, _ = net.SplitHostPort(srv.Addr())
	b.logf("clickhouse-server pid %d on %s", b.chPID, srv.Addr())
	b.machine = b.describeMachine(ctx)
	return b, nil
}

// close stops what this run started and removes its working directory.
func (b *bench) close() {
	b.sim.stop()
	b.sim = nil
	if b.ch != nil {
		if err := b.ch.Stop(); err != nil {
			b.logf("stopping clickhouse-server: %v", err)
		}
		b.ch = nil
	}
	if b.dir != "" && !b.o.keep {
		_ = os.RemoveAll(b.dir)
	} else if b.dir != "" {
		b.logf("kept the working directory %s", b.dir)
	}
}

// logf prints progress on stderr, so stdout holds only the results.
func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.stderr, "[%5.1fs] %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bench) section(title string) *section {
	s := &section{title: title}
	b.secs = append(b.secs, s)
	return s
}

// stage is a measurement of several runs. The runs of the ceilings and of
// the end-to-end backfill are interleaved round by round, so a change in the
// machine's background load (it is shared) hits every figure of a round
// alike and the ratio between them stays meaningful.
type stage interface {
	prepare(ctx context.Context) error
	run(ctx context.Context, r int) error
	// finish releases what prepare made; it runs even after a failure.
	finish(ctx context.Context)
}

// namedStage is a stage and the -only name of its part.
type namedStage struct {
	name string
	st   stage
}

// measure runs the selected parts, then reports.
func (b *bench) measure(ctx context.Context) error {
	var errs []error
	fail := func(name string, err error) {
		b.logf("%s failed: %v", name, err)
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	s := b.o.sizes
	var rounds []namedStage
	for _, n := range []namedStage{
		{"ceiling", &ceilingStage{b: b}},
		{"source", &sourceStage{b: b}},
		{"e2e", &backfillStage{b: b, tag: "e2e", points: s.points, bare: true}},
	} {
		if b.o.only[n.name] {
			rounds = append(rounds, n)
		}
	}
	b.runStages(ctx, rounds, fail)
	if b.o.only["profile"] {
		b.logf("== profile")
		if err := b.profiled(ctx); err != nil {
			fail("profile", err)
		}
	}
	if b.o.only["cut"] {
		b.runStages(ctx, []namedStage{
			{"cut", &backfillStage{b: b, tag: "cut", points: s.cutPoints, ownSim: true, devices: s.cutDevices, simFlags: cutSimFlags, bare: true}},
		}, fail)
	}
	if b.o.only["flat"] {
		b.runStages(ctx, []namedStage{
			{"flat", &backfillStage{b: b, tag: "flat", points: s.flatPoints, ownSim: true, devices: s.flatDevices}},
			{"flat", &backfillStage{b: b, tag: "flat50k", points: s.flatPoints, ownSim: true, devices: s.flatDevices, rpr: 50000}},
			{"flat", &backfillStage{b: b, tag: "flatctx", points: s.flatPoints, ownSim: true, devices: s.flatDevices, simFlags: largeContextFlags}},
			{"flat", &backfillStage{b: b, tag: "flatfirst", points: s.flatPoints, ownSim: true, devices: s.flatDevices, simFlags: resultsFirstFlags}},
		}, fail)
	}
	if b.o.only["incr"] && ctx.Err() == nil {
		b.logf("== incr")
		if err := b.incremental(ctx); err != nil {
			fail("incr", err)
		}
	}
	if b.o.only["idle"] && ctx.Err() == nil {
		b.logf("== idle")
		if err := b.idleFleet(ctx); err != nil {
			fail("idle", err)
		}
	}
	if b.o.only["compression"] {
		b.runStages(ctx, []namedStage{{"compression", &compressionStage{b: b}}}, fail)
	}
	if b.o.only["ratelimit"] && ctx.Err() == nil {
		b.logf("== ratelimit")
		if err := b.rateLimited(ctx); err != nil {
			fail("ratelimit", err)
		}
	}
	if b.o.only["fleet"] && ctx.Err() == nil {
		b.logf("== fleet")
		if err := b.fleetSize(ctx); err != nil {
			fail("fleet", err)
		}
	}
	if b.o.only["steady"] && ctx.Err() == nil {
		b.logf("== steady")
		if err := b.steadyState(ctx); err != nil {
			fail("steady", err)
		}
	}
	if b.o.only["gobench"] && ctx.Err() == nil {
		b.logf("== gobench")
		if err := b.goBenchmarks(ctx); err != nil {
			fail("gobench", err)
		}
	}
	if b.o.only["rollup"] && ctx.Err() == nil {
		b.logf("== rollup")
		if err := b.analystQueries(ctx); err != nil {
			fail("rollup", err)
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, context.Cause(ctx))
	}
	b.sim.stop()
	b.sim = nil
	b.report(errs)
	return errors.Join(errs...)
}

// runStages prepares the stages, runs them round-robin -runs times and
// finishes them; a stage that fails drops out, the others go on.
func (b *bench) runStages(ctx context.Context, stages []namedStage, fail func(string, error)) {
	live := stages[:0:0]
	for _, n := range stages {
		if ctx.Err() != nil {
			return
		}
		b.logf("== %s: prepare", n.name)
		if err := n.st.prepare(ctx); err != nil {
			fail(n.name, err)
			n.st.finish(ctx)
			continue
		}
		live = append(live, n)
	}
	for r := range b.o.runs {
		for i := 0; i < len(live); i++ {
			if ctx.Err() != nil {
				break
			}
			if err := live[i].st.run(ctx, r); err != nil {
				fail(live[i].name, err)
				live[i].st.finish(ctx)
				live = append(live[:i], live[i+1:]...)
				i--
			}
		}
	}
	for _, n := range live {
		n.st.finish(ctx)
	}
}

// simArgs are the fleetsim flags of a generated fleet.
func simArgs(devices, vars, points int, span string) []string {
	return []string{"--seed", "1", "--token", token, "--devices", fmt.Sprint(devices), "--variables", fmt.Sprint(vars),
		"--points", fmt.Sprint(points), "--span", span}
}

// fleet5M is the fleetsim serving the 5 M fleet, started on first use.
func (b *bench) fleet5M(ctx context.Context) (*simProc, error) {
	if b.sim != nil {
		return b.sim, nil
	}
	s := b.o.sizes
	p, err := startSim(ctx, filepath.Join(b.o.bin, "fleetsim"), simArgs(s.devices, s.vars, s.points, "30d")...)
	if err != nil {
		return nil, err
	}
	b.logf("fleetsim pid %d on %s: %d devices × %d variables × %d points", p.pid(), p.url, s.devices, s.vars, s.points)
	b.sim = p
	return p, nil
}

// chClient runs one clickhouse-client query against the harness's server,
// with stdin and stdout as given (nil: none, or collected and returned).
func (b *bench) chClient(ctx context.Context, query string, stdin io.Reader, stdout io.Writer) (string, error) {
	cmd := exec.CommandContext(ctx, clientBinary, "--host", "127.0.0.1", "--port", b.chPort, "--query", query)
	var out, errb bytes.Buffer
	cmd.Stdin = stdin
	cmd.Stdout = &out
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		q := query
		if len(q) > 120 {
			q = q[:120] + "…"
		}
		return "", fmt.Errorf("clickhouse-client %q: %w: %s", q, err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// count is SELECT count() of a table.
func (b *bench) count(ctx context.Context, table string) (int64, error) {
	out, err := b.chClient(ctx, "SELECT count() FROM "+table, nil, nil)
	if err != nil {
		return 0, err
	}
	var n int64
	if _, err := fmt.Sscan(out, &n); err != nil {
		return 0, fmt.Errorf("count of %s: %q: %w", table, out, err)
	}
	return n, nil
}

// describeMachine lists what the figures depend on.
func (b *bench) describeMachine(ctx context.Context) []string {
	var m []string
	add := func(k, v string) { m = append(m, k+": "+v) }
	nproc := fmt.Sprint(runtime.NumCPU())
	if out, err := exec.Command("nproc").Output(); err == nil {
		nproc = strings.TrimSpace(string(out))
	}
	add("CPUs (`nproc`)", nproc)
	add("CPU model", procField("/proc/cpuinfo", "model name"))
	if mem := procField("/proc/meminfo", "MemTotal"); mem != "" {
		var kb int64
		fmt.Sscan(strings.TrimSuffix(mem, " kB"), &kb)
		add("memory", fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20)))
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		add("kernel", strings.TrimSpace(string(out)))
	}
	add("Go", runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
	if v, err := b.chClient(ctx, "SELECT version()", nil, nil); err == nil {
		add("ClickHouse", v+" (clickhouse-server "+chserver.DefaultBinary+", private instance started by the harness)")
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		add("load average at start", strings.Join(strings.Fields(string(la))[:3], " "))
	}
	if b.useTime {
		add("peak RSS and CPU of fleetsync", "`/usr/bin/time -v`")
	} else {
		add("peak RSS and CPU of fleetsync", "wait4 rusage (/usr/bin/time missing: `apt-get install -y time`)")
	}
	return m
}

// procField is the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// quiesce waits until the server runs no merges (up to a minute), so a
// measured run does not pay for the background work of the previous one.
func (b *bench) quiesce(ctx context.Context) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		out, err := b.chClient(ctx, "SELECT count() FROM system.merges", nil, nil)
		if err != nil || out == "0" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	b.logf("clickhouse still merging after a minute; measuring anyway")
}

// insertedParts is the number of parts the INSERTs into db.datapoints
// wrote (level 0: not produced by a merge; merged-away parts are still
// listed for minutes), which sets how much merging the server has to do.
func (b *bench) insertedParts(ctx context.Context, db string) (int64, error) {
	out, err := b.chClient(ctx, "SELECT count() FROM system.parts WHERE database = '"+db+"' AND table = 'datapoints' AND level = 0", nil, nil)
	if err != nil {
		return 0, err
	}
	var n int64
	if _, err := fmt.Sscan(out, &n); err != nil {
		return 0, fmt.Errorf("parts of %s.datapoints: %q: %w", db, out, err)
	}
	return n, nil
}
