// Command fleetsim serves a simulated Fleet Telemetry Service (both API
// families, every documented quirk) over a generated fleet, for fleetsync's
// demo, tests and benchmarks. See docs/fleetsim.md.
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
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(2)
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// duration is a flag accepting Go durations plus a "d" suffix for days
// ("730d", "1d12h").
type duration struct{ d *time.Duration }

func (f duration) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	if *f.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(*f.d/(24*time.Hour)), 10) + "d"
	}
	return f.d.String()
}

func (f duration) Set(v string) error {
	d, err := parseDuration(v)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// parseDuration reads a Go duration with an optional leading day count.
func parseDuration(v string) (time.Duration, error) {
	if days, rest, ok := strings.Cut(v, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("duration %q: want a Go duration or N d (days), e.g. 730d or 1d12h", v)
		}
		d := time.Duration(n * float64(24*time.Hour))
		if rest != "" {
			r, err := time.ParseDuration(rest)
			if err != nil {
				return 0, fmt.Errorf("duration %q: %w", v, err)
			}
			d += r
		}
		return d, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want a Go duration or N d (days), e.g. 730d or 1d12h", v)
	}
	return d, nil
}

// run parses args, serves until ctx is cancelled and returns nil after a
// clean shutdown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)
	opts := fleetsim.Options{Span: 24 * time.Hour, Retention: 730 * 24 * time.Hour, TokenTTL: 6 * time.Hour}
	var tokens, orgTokens, accountTokens, undecodable, reject stringList
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on; 127.0.0.1:0 picks a free port")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with the PEM certificate in `FILE` (with --tls-key)")
	tlsKey := fs.String("tls-key", "", "the PEM key of --tls-cert, in `FILE`")
	fs.Int64Var(&opts.Seed, "seed", 1, "seed of the generated fleet (same seed, same fleet)")
	fs.IntVar(&opts.Devices, "devices", 5, "number of generated devices")
	fs.IntVar(&opts.Variables, "variables", 4, "variables per device (kinds cycle: temperature, humidity, battery, position)")
	fs.IntVar(&opts.Points, "points", 1000, "points per variable, spread over --span ending at start-up")
	fs.Var(duration{&opts.Span}, "span", "time the points are spread over, ending at start-up (Go duration, or Nd for days)")
	fs.Var(&tokens, "token", "accept `T` as an ordinary API token (repeatable); without any token flag, demo-token is accepted")
	fs.Var(&orgTokens, "org-token", "accept `T` as an organization-scoped token (repeatable)")
	fs.Var(&accountTokens, "account-token", "accept `T` as an account-scoped token (repeatable)")
	fs.Var(duration{&opts.Retention}, "retention", "the account's data-retention window (Go duration, or Nd for days)")
	fs.Var(duration{&opts.TokenTTL}, "token-ttl", "how long the flag-given tokens stay valid, counted from start-up (Go duration, or Nd for days)")
	fs.BoolVar(&opts.CountAsBool, "count-as-bool", false, "render the count of GET values as a boolean, as in the spec's sample")
	fs.DurationVar(&opts.Faults.Latency, "latency", 0, "fault: delay added before every /api/ response")
	fs.Float64Var(&opts.Faults.ErrorRate, "error-rate", 0, "fault: fraction of /api/ requests answered 500 or 503")
	fs.Float64Var(&opts.Faults.RateLimitRate, "rate-limit-rate", 0, "fault: fraction of /api/ requests answered 429")
	fs.StringVar(&opts.Faults.RetryAfter, "retry-after", "1", "fault: Retry-After header value of the 429s (seconds or an HTTP-date)")
	fs.Float64Var(&opts.RateLimit.PerSecond, "rate-limit", 0, "per-token limit: each token's bucket refills at `R` requests per second; a request finding it empty is answered 429 (no Retry-After); 0 = off")
	fs.IntVar(&opts.RateLimit.Burst, "burst", 0, "per-token limit: the bucket's size, requests an idle token may send at once (default ceil(--rate-limit))")
	fs.BoolVar(&opts.RateLimit.RetryAfter, "rate-limit-retry-after", false, "per-token limit: add Retry-After (seconds until the bucket refills) to its 429s")
	fs.IntVar(&opts.RateLimit.Quota, "quota", 0, "per-token budget: after `N` requests a token's budget is exhausted and its requests are answered 420 for --quota-exhausted-for, then it starts over; 0 = off")
	fs.DurationVar(&opts.RateLimit.ExhaustedFor, "quota-exhausted-for", time.Minute, "per-token budget: how long an exhausted budget answers 420")
	fs.IntVar(&opts.RejectPageSizeAbove, "reject-page-size-above", 0, "answer Platform API lists whose page_size is above `N` with 400 (code 400001) instead of clamping it to 1000; 0 = clamp")
	fs.Float64Var(&opts.Faults.CutRate, "cut-rate", 0, "fault: fraction of Data API responses whose body is cut mid-stream")
	fs.DurationVar(&opts.Faults.SlowHeaders, "slow-headers", 0, "fault: delay before the headers of a fraction --slow-rate of requests")
	fs.Float64Var(&opts.Faults.SlowRate, "slow-rate", 0, "fault: fraction of requests delayed by --slow-headers")
	fs.Int64Var(&opts.Faults.Seed, "fault-seed", 1, "seed of the choice of faulty requests")
	fs.Var(&undecodable, "undecodable-variable", "fault: raw-series cells of variable `ID` carry data no decoder accepts (\"n/a\" values, 1e30 timestamps) (repeatable)")
	fs.Var(&reject, "reject-variable", "fault: raw-series requests naming variable `ID` are answered 400 naming it (repeatable)")
	fs.Func("last-activity", "`MODE` of lastActivity: any-write (latest write of any point), newest-write (write time of the newest point), newest-ts (the newest point's timestamp) or none (always null) (default any-write)", func(v string) error {
		m, err := fleetsim.ParseLastActivityMode(v)
		if err != nil {
			return err
		}
		opts.LastActivity = m
		return nil
	})
	var seriesCut, seriesOrder string
	fs.Func("series-cut", "`CUT`: the points a raw-series frame (join_dataframes false) cut by `limit` keeps: newest (the newest limit points), oldest (the oldest), any (any limit points, at random) or mixed (newest or oldest, at random per frame) (default newest)", func(v string) error {
		_, err := fleetsim.ParseSeriesCut(v)
		seriesCut = v
		return err
	})
	fs.Func("series-order", "`ORDER` a raw-series frame (join_dataframes false) serves its rows in, cut or not: newest-first, oldest-first or shuffled (default newest-first); the older values newest, oldest and newest-ascending set the cut too (newest cut newest first, oldest cut oldest first, newest cut oldest first)", func(v string) error {
		_, err := fleetsim.ParseSeriesOrder(v)
		seriesOrder = v
		return err
	})
	fs.IntVar(&opts.ContextBytes, "context-bytes", 0, "pad every generated point's context with a string member \"pad\" to at least `N` bytes of JSON (the generated contexts are {} or a ~32-byte lat/lng object); 0 = off")
	fs.BoolVar(&opts.ResultsFirst, "results-first", false, "write the results member before the columns member in raw-series responses (JSON members are unordered; a client must hold the results until it knows the columns)")
	fs.StringVar(&opts.PublicURL, "public-url", "", "`URL` (scheme, host, optional path prefix) on which the absolute URLs are built (next/previous links, url fields), as behind a proxy; default: the request's scheme and host")
	fs.Float64Var(&opts.Live.PointsPerSecond, "live-points", 0, "live mode: new points per second (each newer than its variable's newest); 0 = off")
	fs.Float64Var(&opts.Live.LatePointsPerSecond, "live-late-points", 0, "live mode: late points per second (behind their variable's newest); 0 = off")
	fs.DurationVar(&opts.Live.LateMaxAge, "live-late-max-age", 10*time.Minute, "live mode: how far behind the newest point a late point may land")
	// Usage writes to the flag set's output, which is discarded while
	// parsing: the flag package calls Usage itself on --help and on a bad
	// flag, and a bad flag is reported on one line by main, the full usage
	// only once, on --help.
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fleetsim [flags]\n\nServes a simulated Fleet Telemetry Service (/api/v2.0, /api/v1.6) over a generated fleet,\nplus a control interface under /_sim/ (see docs/fleetsim.md). Prints\n\"fleetsim listening on http://HOST:PORT\" (https with --tls-cert) when ready; serves until SIGTERM or SIGINT.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
			return err
		}
		return fmt.Errorf("%w; see --help", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q; see --help", fs.Args())
	}
	so, err := fleetsim.ParseSeriesFlags(seriesCut, seriesOrder)
	if err != nil {
		return fmt.Errorf("%w; see --help", err)
	}
	opts.SeriesOrder = so
	opts.Tokens, opts.OrgTokens, opts.AccountTokens = tokens, orgTokens, accountTokens
	opts.Faults.UndecodableVariables, opts.Faults.RejectVariables = undecodable, reject
	if len(tokens)+len(orgTokens)+len(accountTokens) == 0 {
		opts.Tokens = []string{"demo-token"}
		fmt.Fprintln(stderr, "fleetsim: no --token given; accepting the ordinary token demo-token")
	}
	sim, err := fleetsim.New(opts)
	if err != nil {
		return err
	}
	defer sim.Close()

	srv := &http.Server{Handler: sim, ReadHeaderTimeout: 30 * time.Second}
	scheme, err := serveTLS(srv, *tlsCert, *tlsKey)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	errc := make(chan error, 1)
	go func() {
		if scheme == "https" {
			errc <- srv.ServeTLS(ln, "", "") // the pair is in srv.TLSConfig
			return
		}
		errc <- srv.Serve(ln)
	}()
	fmt.Fprintf(stdout, "fleetsim listening on %s://%s\n", scheme, ln.Addr())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
