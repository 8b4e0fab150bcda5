// Command fleetsync-demo shows fleetsync at work on one machine: it serves
// an embedded fleetsim, uses the ClickHouse that answers at --clickhouse or
// starts a private one, runs the product's own `fleetsync sync` on the
// default configuration pointed at both, and prints what landed with two
// example analyst queries. `make demo` runs it.
//
// It is a command of its own so that the binary users deploy links neither
// the simulator nor the ClickHouse launcher (cmd/fleetsync/deps_test.go);
// it runs the built fleetsync binary rather than a copy of its code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// demoToken is the one token the embedded fleetsim accepts.
const demoToken = "demo-token"

// demoDatabase is where the demo's sync writes.
const demoDatabase = "fleetsync_demo"

// options are the demo's flags.
type options struct {
	devices, variables, points int
	clickhouse, dir, fleetsync string
}

// usageError is bad usage: exit status 2, as fleetsync's.
type usageError struct{ error }

// run executes the demo and returns the exit status: 0 done, 1 failed, 2
// bad usage. Errors are printed as one line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = demo(ctx, opts, stdout, stderr)
	}
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "fleetsync-demo: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func parseArgs(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fleetsync-demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&o.devices, "devices", 6, "devices in the embedded fleet")
	fs.IntVar(&o.variables, "variables", 4, "variables per device")
	fs.IntVar(&o.points, "points", 5000, "points per variable, over the last 7 days")
	fs.StringVar(&o.clickhouse, "clickhouse", "127.0.0.1:9000", "ClickHouse to use when one answers there; otherwise a local server is started")
	fs.StringVar(&o.dir, "dir", ".demo", "directory for the demo's configuration and for a ClickHouse it starts (kept between runs)")
	fs.StringVar(&o.fleetsync, "fleetsync", "", "the fleetsync binary to run (default: the one beside this program, else on PATH)")
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: fleetsync-demo [--devices N] [--variables N] [--points N] [--clickhouse ADDR] [--dir DIR] [--fleetsync PATH]\n\nFlags:\n")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return o, err
		}
		return o, usageError{fmt.Errorf("%w; see --help", err)}
	}
	if fs.NArg() > 0 {
		return o, usageError{fmt.Errorf("unexpected argument %q; see --help", fs.Arg(0))}
	}
	if o.devices < 1 || o.variables < 1 || o.points < 1 {
		return o, usageError{errors.New("--devices, --variables and --points must be at least 1")}
	}
	return o, nil
}

// findFleetsync returns the fleetsync binary to run: the given path, else
// the one beside this program (make build puts both in bin/), else the one
// on PATH.
func findFleetsync(given string) (string, error) {
	if given != "" {
		if _, err := os.Stat(given); err != nil {
			return "", usageError{fmt.Errorf("--fleetsync %s: %w; build it with 'make build'", given, err)}
		}
		return given, nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "fleetsync")
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("fleetsync"); err == nil {
		return p, nil
	}
	return "", usageError{errors.New("no fleetsync binary beside this program nor on PATH; build both with 'make build' (bin/), or pass --fleetsync PATH")}
}

func demo(ctx context.Context, o options, stdout, stderr io.Writer) error {
	bin, err := findFleetsync(o.fleetsync)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return fmt.Errorf("create the demo directory: %w; pass --dir with a writable path", err)
	}

	addr := o.clickhouse
	if !chserver.Reachable(ctx, addr) {
		fmt.Fprintf(stderr, "no ClickHouse answers at %s; starting a local clickhouse-server in %s/clickhouse ...\n", addr, o.dir)
		srv, err := chserver.Start(ctx, chserver.Options{Dir: filepath.Join(o.dir, "clickhouse")})
		if err != nil {
			return fmt.Errorf("start a local ClickHouse: %w (install it with 'apt-get install -y clickhouse-server clickhouse-client', or point --clickhouse at a running server)", err)
		}
		defer srv.Stop()
		addr = srv.Addr()
	}

	sim, err := fleetsim.New(fleetsim.Options{Seed: 42, Devices: o.devices, Variables: o.variables, Points: o.points,
		Span: 7 * 24 * time.Hour, Tokens: []string{demoToken}})
	if err != nil {
		return fmt.Errorf("start the embedded fleetsim: %w", err)
	}
	defer sim.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the embedded fleetsim: %w", err)
	}
	hs := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	baseURL := "http://" + ln.Addr().String()
	fmt.Fprintf(stderr, "embedded fleetsim serving %d devices x %d variables x %d points at %s\n", o.devices, o.variables, o.points, baseURL)

	cfgPath := filepath.Join(o.dir, "fleetsync.yaml")
	if err := os.WriteFile(cfgPath, []byte(demoConfig(baseURL, addr)), 0o600); err != nil {
		return fmt.Errorf("write the demo's configuration: %w", err)
	}
	fmt.Fprintf(stderr, "running %s sync --config %s\n", bin, cfgPath)
	start := time.Now()
	if err := syncOnce(ctx, bin, cfgPath, stdout, stderr); err != nil {
		return err
	}
	return report(ctx, addr, time.Since(start), stdout)
}

// demoConfig is the configuration the demo's sync runs on: every default
// of `fleetsync config`, pointed at the embedded fleetsim and the demo's
// ClickHouse.
func demoConfig(baseURL, chAddr string) string {
	return fmt.Sprintf(`# Written by fleetsync-demo on each run: fleetsync's defaults, pointed at the
# embedded fleetsim (a new port each run) and the demo's ClickHouse.
source:
  base_url: %s
  token_file: ""
  token: %s
  # The embedded fleetsim has no rate limit: no cautious start.
  initial_requests_per_second: 0
clickhouse:
  addr: [%q]
  database: %s
log:
  level: warn
  format: console
`, baseURL, demoToken, chAddr, demoDatabase)
}

// syncOnce runs `fleetsync sync` on the demo's configuration. Its
// environment has no FLEETSYNC_ variable: the configuration is the file
// (fleetsync would also reject the test suite's FLEETSYNC_CLICKHOUSE_SERVER
// as an unknown key). A cancelled demo stops it with SIGTERM, so that it
// releases its lease as on any other stop.
func syncOnce(ctx context.Context, bin, cfgPath string, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, bin, "sync", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEETSYNC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%s sync --config %s exited with status %d; its error is printed above", bin, cfgPath, ee.ExitCode())
		}
		return fmt.Errorf("run %s: %w", bin, err)
	}
	return nil
}
