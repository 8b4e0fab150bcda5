package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// version is set by the linker (make build) for released binaries.
var version = "dev"

// Exit statuses of the contract.
const (
	exitOK       = 0
	exitFailed   = 1
	exitBadUsage = 2
)

// usageError is bad usage or bad configuration: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// failedError reports variables that failed while the others' progress was
// kept: exit status 1 with the message already logged.
type failedError struct{ msg string }

func (e *failedError) Error() string { return e.msg }

type command struct {
	name    string
	summary string
	usage   string
	run     func(ctx context.Context, env *cliEnv, args []string) error
}

// cliEnv is what a command may touch of the process, so the whole command
// line runs in-process in tests.
type cliEnv struct {
	stdout, stderr io.Writer
	environ        []string
}

func commands() []command {
	return []command{
		{"sync", "run one complete cycle, then exit (CronJob mode)", "fleetsync sync --config FILE", cmdSync},
		{"run", "the daemon: cycles on sync.schedule, serves /metrics, /healthz, /readyz", "fleetsync run --config FILE", cmdRun},
		{"migrate", "create or upgrade the ClickHouse tables", "fleetsync migrate --config FILE", cmdMigrate},
		{"status", "per-variable high-water mark and lag, worst first", "fleetsync status --config FILE [--json] [--limit N]", cmdStatus},
		{"backfill", "re-extract a closed range without moving marks backwards", "fleetsync backfill --config FILE --from T --to T [--device KEY]...", cmdBackfill},
		{"rollup", "rebuild the analyst tables (latest values, hourly aggregates) over a range", "fleetsync rollup --config FILE --from T --to T", cmdRollup},
		{"verify", "compare the warehouse's counts with the source's statistics", "fleetsync verify --config FILE --from T --to T [--json] [--repair]", cmdVerify},
		{"config", "print an example configuration with every key and its default", "fleetsync config", cmdConfigExample},
		{"version", "print the version", "fleetsync version", cmdVersion},
	}
}

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, "fleetsync keeps a ClickHouse warehouse in sync with a Fleet Telemetry Service.\n\nUsage:\n  fleetsync COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'fleetsync COMMAND --help' for a command's flags.\nExit status: 0 success, 1 some variables or the cycle failed, 2 bad usage or configuration.\n")
}

// run executes the command line and returns the exit status. Errors are
// printed as one line, never with a stack trace.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, environ []string) int {
	env := &cliEnv{stdout: stdout, stderr: stderr, environ: environ}
	if len(args) == 0 {
		mainUsage(stderr)
		return exitBadUsage
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
		mainUsage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, env, args[1:])
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		}
		fmt.Fprintf(stderr, "fleetsync %s: %s\n", name, oneLine(err.Error()))
		var ue *usageError
		if errors.As(err, &ue) {
			return exitBadUsage
		}
		return exitFailed
	}
	fmt.Fprintf(stderr, "fleetsync: unknown command %q; run 'fleetsync --help' for the list\n", name)
	return exitBadUsage
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	return strings.ReplaceAll(s, "\n", "; ")
}

// newFlags returns a flag set that prints its usage to stdout on --help and
// reports errors as usage errors.
func newFlags(env *cliEnv, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(usage, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(env.stdout, "Usage: %s\n\nFlags:\n", usage)
		fs.SetOutput(env.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// Parse has printed the usage already.
			return err
		}
		return usagef("%v; see --help", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q; see --help", fs.Arg(0))
	}
	return nil
}

// parseTime reads RFC 3339 or POSIX milliseconds.
func parseTime(flagName, s string) (int64, error) {
	if s == "" {
		return 0, usagef("--%s is required (RFC 3339 like 2026-01-02T15:04:05Z, or POSIX milliseconds)", flagName)
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 100_000_000_000 {
			return 0, usagef("--%s %s looks like seconds; give POSIX milliseconds or RFC 3339", flagName, s)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, usagef("--%s %q: not RFC 3339 (2026-01-02T15:04:05Z) nor POSIX milliseconds", flagName, s)
	}
	return t.UnixMilli(), nil
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }
