package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// daemonProc is a `fleetsync run` process the steady-state section
// started: its log goes to a file, and each cycle it finishes is reported
// with a snapshot of every counter the section reads, taken before the
// next cycle can start.
type daemonProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	// cycles receives a snapshot at the end of each cycle.
	cycles chan snapshot
	// snap takes a snapshot, given the daemon's PID and the URL of its
	// /metrics (from its start-up line); the log reader calls it.
	snap func(pid int, metricsURL string) snapshot
	// logPath is where its standard error (the JSON log) goes.
	logPath string
}

// snapshot is every counter of one instant: fleetsim's request counters
// and rows served, fleetsync's metrics, and the CPU the processes used so
// far. The difference of two is what happened between them.
type snapshot struct {
	at time.Time
	// log is the summary of the cycle that ended here (zero for a
	// snapshot taken otherwise); failed is set when it failed.
	log    cycleLog
	failed bool
	// requests are fleetsim's counters ("METHOD pattern status": n), and
	// served the points its raw-series responses carried.
	requests map[string]int
	served   int64
	// metrics are fleetsync's Prometheus samples by series name, labels
	// included ("fleetsync_rows_inserted_total{table=\"datapoints\"}").
	metrics map[string]float64
	// CPU seconds of fleetsync, clickhouse-server and fleetsim so far.
	syncCPU, chCPU, simCPU float64
	err                    error
}

// startDaemon runs `bin/fleetsync run --config cfg`, its log in logPath,
// in an environment without the caller's FLEETSYNC_ variables (they would
// be taken for configuration keys).
func startDaemon(bin, cfg, logPath string, snap func(pid int, metricsURL string) snapshot) (*daemonProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	d := &daemonProc{done: make(chan struct{}), cycles: make(chan snapshot, 1024), snap: snap, logPath: logPath}
	d.cmd = exec.Command(bin, "run", "--config", cfg)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEETSYNC_") {
			d.cmd.Env = append(d.cmd.Env, kv)
		}
	}
	out, err := d.cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start fleetsync run: %w", err)
	}
	d.cmd.Stdout = logf
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s run: %w", bin, err)
	}
	var reading sync.WaitGroup
	reading.Add(1)
	go func() {
		defer reading.Done()
		d.readLog(out, logf)
	}()
	go func() {
		reading.Wait()
		_ = d.cmd.Wait()
		logf.Close()
		close(d.cycles)
		close(d.done)
	}()
	return d, nil
}

// daemonLine is what the section reads of a fleetsync log line.
type daemonLine struct {
	Msg     string `json:"msg"`
	Metrics string `json:"metrics"`
	// Read is set on a cycle's summary line alone: the daemon logs a
	// failed cycle again without it.
	Read *int `json:"read"`
}

// readLog copies the log to logf and sends a snapshot at each cycle's
// summary line ("cycle finished", "cycle finished with failures" or
// "cycle failed", with the cycle's figures), with that summary.
func (d *daemonProc) readLog(r io.Reader, logf io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	metricsURL := ""
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = logf.Write(line)
		_, _ = io.WriteString(logf, "\n")
		var l daemonLine
		if json.Unmarshal(line, &l) != nil {
			continue
		}
		switch {
		case l.Msg == "fleetsync daemon started":
			metricsURL = l.Metrics
		case strings.HasPrefix(l.Msg, "cycle ") && l.Read != nil:
			s := d.snap(d.cmd.Process.Pid, metricsURL)
			_ = json.Unmarshal(line, &s.log)
			s.failed = l.Msg != "cycle finished"
			d.cycles <- s
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

func (d *daemonProc) pid() int { return d.cmd.Process.Pid }

// stop ends the daemon by its PID: SIGTERM (it finishes or abandons the
// current request, commits and exits), then SIGKILL after a grace period.
func (d *daemonProc) stop() {
	if d == nil || d.cmd.Process == nil {
		return
	}
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// nextCycle waits for the daemon's next cycle summary, or fails after
// timeout, when the daemon exits or when ctx ends.
func (d *daemonProc) nextCycle(ctx context.Context, timeout time.Duration) (snapshot, error) {
	select {
	case s, ok := <-d.cycles:
		if !ok {
			return snapshot{}, fmt.Errorf("fleetsync run exited: %s", tail(d.logPath, 1500))
		}
		return s, s.err
	case <-time.After(timeout):
		return snapshot{}, fmt.Errorf("no cycle of fleetsync run ended within %s: %s", timeout, tail(d.logPath, 1500))
	case <-ctx.Done():
		return snapshot{}, context.Cause(ctx)
	}
}

// takeSnapshot reads every counter now: fleetsim's over its control
// interface, fleetsync's /metrics at metricsURL ("" before it is known),
// and the CPU of the three processes.
func takeSnapshot(ctx context.Context, ctl *simControl, metricsURL string, syncPID, chPID, simPID int) snapshot {
	s := snapshot{at: time.Now()}
	var errs []error
	s.syncCPU, _ = procCPU(syncPID)
	s.chCPU, _ = procCPU(chPID)
	s.simCPU, _ = procCPU(simPID)
	if err := ctl.do(ctx, http.MethodGet, "/_sim/counters", nil, &s.requests); err != nil {
		errs = append(errs, err)
	}
	var served struct {
		Rows int64 `json:"raw_series_rows"`
	}
	if err := ctl.do(ctx, http.MethodGet, "/_sim/served", nil, &served); err != nil {
		errs = append(errs, err)
	}
	s.served = served.Rows
	if metricsURL != "" {
		m, err := scrape(ctx, ctl.hc, metricsURL)
		if err != nil {
			errs = append(errs, err)
		}
		s.metrics = m
	}
	s.err = errors.Join(errs...)
	return s
}

// scrape reads a Prometheus text exposition into samples keyed by series
// name with its labels, as written.
func scrape(ctx context.Context, hc *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseExposition(resp.Body)
}

// parseExposition reads the samples of a Prometheus text exposition.
func parseExposition(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		out[l[:i]] = v
	}
	return out, sc.Err()
}

// requestKind sorts a fleetsim counter key ("METHOD pattern status") into
// what the steady-state section reports: raw-series data requests, count
// (aggregation) requests, the Platform API lists by what they list, and
// other requests; "" for keys that double another (cut and early ones).
func requestKind(key string) string {
	f := strings.Fields(key)
	if len(f) < 2 || f[0] == "cut" || f[0] == "early" {
		return ""
	}
	p := f[1]
	switch {
	case p == "/api/v1.6/data/raw/series":
		return "data"
	case p == "/api/v1.6/data/stats/aggregation/":
		return "count"
	case strings.HasPrefix(p, "/api/v1.6/"):
		return "other data"
	case strings.HasPrefix(p, "/api/v2.0/device_groups/"):
		return "groups"
	case strings.HasPrefix(p, "/api/v2.0/organizations/"):
		return "organizations"
	case strings.HasSuffix(p, "/variables/") || strings.HasPrefix(p, "/api/v2.0/variables/"):
		return "variables"
	case strings.HasPrefix(p, "/api/v2.0/devices/"):
		return "devices"
	case strings.HasPrefix(p, "/api/v2.0/"):
		return "other lists"
	}
	return "other"
}

// listKinds are the Platform API kinds of requestKind, in report order.
var listKinds = []string{"devices", "variables", "groups", "organizations", "other lists"}

// requestsBetween sums the requests of each kind between two snapshots.
func requestsBetween(from, to snapshot) map[string]int {
	out := map[string]int{}
	for k, n := range to.requests {
		if kind := requestKind(k); kind != "" {
			out[kind] += n - from.requests[k]
		}
	}
	return out
}

// metricBetween is the growth of a fleetsync counter between snapshots:
// the sum over the series whose name (with labels) starts with prefix.
func metricBetween(from, to snapshot, prefix string) float64 {
	sum := 0.0
	for k, v := range to.metrics {
		if k == prefix || strings.HasPrefix(k, prefix+"{") {
			sum += v - from.metrics[k]
		}
	}
	return sum
}
