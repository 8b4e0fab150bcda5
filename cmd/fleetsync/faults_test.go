package main

// The fault suite of issue 7: each test injects one kind of failure into a
// real sync (fleetsim for the API, a real ClickHouse) and checks the oracle:
// the warehouse holds exactly the source's in-retention points under FINAL,
// no mark moved backwards or past a point not loaded, and the exit status is
// the contract's. docs/reliability.md lists what each test proves.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

func sameMarks(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestFaultSyncKilledInEachPhaseThenRerunIsExact(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	w := newFaultWorld(t, worldOpts{
		// One device: fleetsim leaves the last variable of device 1 empty,
		// and its mark (0) would be committed without any INSERT.
		sim:    fleetsim.Options{Devices: 1, Variables: 12, Points: 2000, Span: 20 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 20 * time.Millisecond}},
		source: "page_size: 2",
		// One insert worker: while the proxy holds its INSERT, nothing else
		// is acknowledged, so no mark can move.
		sync:  "rows_per_request: 500\nvariables_per_request: 2\nmax_in_flight: 2\nbatch_rows: 3000\ninsert_workers: 1",
		proxy: true,
	})
	sync := []string{"sync", "--config", w.cfgPath}
	prev := map[string]int64{}
	datapoints := "INSERT INTO `" + w.db + "`.`datapoints`"
	syncState := "INSERT INTO `" + w.db + "`.`sync_state`"
	phases := []struct {
		name string
		// arm prepares the hold and returns a wait for it.
		arm   func() func()
		check func(before map[string]int64, rowsBefore uint64)
	}{
		{"during the metadata walk", func() func() {
			h := w.gate.holdNext(-1, func(r *http.Request) bool {
				return r.Method == "GET" && strings.Contains(r.URL.Path, "/variables")
			})
			return func() { h.await(t, 30*time.Second, "a device's variable list") }
		}, func(_ map[string]int64, rowsBefore uint64) {
			if n := w.rawRows(); n != rowsBefore {
				t.Fatalf("%d rows loaded before any data request", n-rowsBefore)
			}
		}},
		{"waiting for a raw-series response", func() func() {
			h := w.gate.holdNext(-1, isPath("POST", "/api/v1.6/data/raw/series"))
			return func() { h.await(t, 30*time.Second, "a raw-series request") }
		}, nil},
		{"reading a raw-series body", func() func() {
			h := w.gate.holdNext(4000, isPath("POST", "/api/v1.6/data/raw/series"))
			return func() { h.await(t, 30*time.Second, "a raw-series body") }
		}, nil},
		{"sending an INSERT into datapoints", func() func() {
			h := w.proxy.holdStatement(datapoints, true, 0)
			return func() { h.await(t, 30*time.Second, "an INSERT into datapoints") }
		}, func(before map[string]int64, _ uint64) {
			if m := w.marks(); !sameMarks(m, before) {
				t.Fatalf("marks changed although no INSERT was acknowledged: %v -> %v", before, m)
			}
		}},
		{"after its INSERTs, before committing marks", func() func() {
			h := w.proxy.holdStatement(syncState, false, 0)
			return func() { h.await(t, 30*time.Second, "the first commit of marks") }
		}, func(before map[string]int64, rowsBefore uint64) {
			if w.rawRows() == rowsBefore {
				t.Fatal("no rows loaded before the first commit of marks")
			}
			if m := w.marks(); !sameMarks(m, before) {
				t.Fatalf("marks changed although the commit was held: %v -> %v", before, m)
			}
		}},
		{"between two commits of marks", func() func() {
			// Marks are committed every second and at the end: slow the
			// source so that the cycle lasts several seconds, whatever the
			// speed of the machine, and a second commit surely comes.
			w.sim.SetFaults(fleetsim.Faults{Latency: 250 * time.Millisecond})
			h := w.proxy.holdStatement(syncState, false, 1)
			return func() { h.await(t, 60*time.Second, "the second commit of marks") }
		}, func(map[string]int64, uint64) {
			w.sim.SetFaults(fleetsim.Faults{Latency: 20 * time.Millisecond})
		}},
	}
	rounds := 1
	if heavyFaults() {
		rounds = 3
	}
	kills := 0
	for round := range rounds {
		if round > 0 {
			// A full window of new data, so the next round's cycle has
			// every phase to be killed in.
			w.addBurst(2000, float64(round))
		}
		for _, ph := range phases {
			before, rowsBefore := w.marks(), w.rawRows()
			wait := ph.arm()
			p := startBinary(t, nil, sync...)
			wait()
			p.kill()
			kills++
			w.gate.releaseAll()
			w.proxy.dropHeld()
			t.Logf("round %d, killed %s: %d rows, %d marks", round, ph.name, w.rawRows(), len(w.marks()))
			prev = w.checkMarksCovered(prev)
			if ph.check != nil {
				ph.check(before, rowsBefore)
			}
		}
	}
	w.sync()
	w.checkMarksCovered(prev)
	n := w.checkOracle()
	t.Logf("rerun after %d kills loaded the %d in-retention points exactly", kills, n)
}

// startSync runs `fleetsync sync` in-process in the background; the
// returned function waits for its exit status.
func (w *world) startSync(environ []string, stderr *syncBuffer) func(within time.Duration) int {
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"sync", "--config", w.cfgPath}, io.Discard, stderr, environ)
	}()
	return func(within time.Duration) int {
		w.t.Helper()
		select {
		case code := <-done:
			return code
		case <-time.After(within):
			w.t.Fatalf("fleetsync sync did not exit within %s; its log ends:\n%s", within, lastLines(stderr.String(), 15))
			return -1
		}
	}
}

// awaitLeaseLapse waits until the sync lease is free or expired.
func (w *world) awaitLeaseLapse() {
	w.t.Helper()
	poll(w.t, 3*time.Minute, "the sync lease to lapse", func() bool {
		var token string
		var expires int64
		err := w.conn.QueryRow(context.Background(), "SELECT argMax(token, version), argMax(expires_at_ms, version) FROM `"+w.db+"`.sync_lease").Scan(&token, &expires)
		if err != nil {
			w.t.Fatalf("read the lease: %v", err)
		}
		return token == "" || time.Now().UnixMilli() > expires
	})
}

func TestFaultClickHouseOutage(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	ctx := context.Background()
	srv := chtest.Start(t, chserver.Options{})
	w := newFaultWorld(t, worldOpts{
		server: srv,
		sim:    fleetsim.Options{Devices: 3, Variables: 4, Points: 3000, Span: 10 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 10 * time.Millisecond}},
		// A short lease, so one left behind by a cycle that could not
		// release it (ClickHouse down) lapses quickly.
		sync: "rows_per_request: 400\nvariables_per_request: 1\nmax_in_flight: 2\nbatch_rows: 2000\nlease_ttl: 3s",
		// Long enough to outlast a restart of the server.
		clickhouse: "retry_max_elapsed: 90s\ndial_timeout: 1s",
	})

	t.Run("restarted mid-cycle", func(t *testing.T) {
		w.t = t
		var stderr syncBuffer
		wait := w.startSync(nil, &stderr)
		poll(t, 60*time.Second, "the first rows to land", func() bool { return w.rawRows() > 0 })
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		poll(t, 60*time.Second, "the loader to retry against the stopped server", func() bool {
			return strings.Contains(stderr.String(), "clickhouse write failed; retrying")
		})
		if err := srv.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		w.reconnect()
		code := wait(120 * time.Second)
		t.Logf("the cycle across the restart exited %d", code)
		switch code {
		case 0:
		case 1:
			// A clean failure is allowed; the next cycle must finish.
			w.sync()
		default:
			t.Fatalf("fleetsync sync exited %d across a ClickHouse restart:\n%s", code, lastLines(stderr.String(), 10))
		}
		w.checkMarksCovered(nil)
		w.checkOracle()
	})

	t.Run("stays down", func(t *testing.T) {
		w.t = t
		before := w.marks()
		w.addNewPoints(1, false, "")
		h := w.gate.holdNext(-1, isPath("POST", "/api/v1.6/data/raw/series"))
		var stderr syncBuffer
		wait := w.startSync([]string{"FLEETSYNC_CLICKHOUSE_RETRY_MAX_ELAPSED=3s"}, &stderr)
		h.await(t, 60*time.Second, "the first raw-series request")
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		down := time.Now()
		w.gate.releaseAll()
		code := wait(120 * time.Second)
		took := time.Since(down)
		last := lastLines(stderr.String(), 1)
		t.Logf("with ClickHouse down: exit %d after %s: %s", code, took.Round(time.Millisecond), last)
		if code != 1 {
			t.Fatalf("exit %d with ClickHouse down, want 1; log:\n%s", code, lastLines(stderr.String(), 10))
		}
		if took > 60*time.Second {
			t.Fatalf("fleetsync took %s to give up on a ClickHouse that is down (retry budget 3s)", took)
		}
		if !strings.HasPrefix(last, "fleetsync sync: ") || !strings.Contains(last, "datapoints") || !strings.Contains(last, "connection refused") || !strings.Contains(last, "clickhouse.addr") {
			t.Fatalf("the final error does not say that inserting into ClickHouse failed and what to check: %q", last)
		}
		if err := srv.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		w.reconnect()
		if after := w.marks(); !sameMarks(before, after) {
			t.Fatalf("marks moved while ClickHouse was down: %v -> %v", before, after)
		}
		// The lease could not be released while ClickHouse was down, and its
		// holder (this test process) is alive: it lapses after its ttl.
		w.awaitLeaseLapse()
		w.sync()
		w.checkMarksCovered(before)
		w.checkOracle()
	})
}

// metricSum adds up every sample of a metric family (all label sets).
func metricSum(text, name string) float64 {
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			if v, ok := metricValue(line, line[:strings.LastIndexByte(line, ' ')]); ok {
				sum += v
			}
		}
	}
	return sum
}

// daemon is `fleetsync run` in-process, its /metrics base URL and its log.
type daemonRun struct {
	base   string
	stderr *syncBuffer
	cancel context.CancelFunc
	// done is closed when run returns; code is its exit status.
	done chan struct{}
	code int
}

func (w *world) startDaemon(environ []string) *daemonRun {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemonRun{stderr: &syncBuffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		d.code = run(ctx, []string{"run", "--config", w.cfgPath}, io.Discard, d.stderr, environ)
		close(d.done)
	}()
	w.t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(60 * time.Second):
		}
	})
	poll(w.t, 30*time.Second, "the daemon's start line", func() bool {
		m := metricsURLRe.FindStringSubmatch(d.stderr.String())
		if m != nil {
			d.base = m[1]
		}
		return m != nil
	})
	return d
}

func (d *daemonRun) metrics() string { _, body := httpGet(d.base + "/metrics"); return body }

// awaitCycle waits for the daemon's first cycle to end and fails the test
// unless it succeeded.
func (d *daemonRun) awaitSuccessfulCycle(t *testing.T, within time.Duration) {
	t.Helper()
	var ok, failed float64
	poll(t, within, "the daemon's first cycle to end", func() bool {
		body := d.metrics()
		ok, _ = metricValue(body, `fleetsync_cycles_total{result="success"}`)
		failed, _ = metricValue(body, `fleetsync_cycles_total{result="failure"}`)
		return ok+failed >= 1
	})
	if failed > 0 {
		t.Fatalf("the daemon's cycle failed under faults; log:\n%s", lastLines(d.stderr.String(), 15))
	}
}

// stop cancels the daemon as SIGTERM does and returns its exit status.
func (d *daemonRun) stop(t *testing.T) int {
	t.Helper()
	d.cancel()
	select {
	case <-d.done:
		return d.code
	case <-time.After(60 * time.Second):
		t.Fatal("the daemon did not stop within 60s of cancellation")
		return -1
	}
}

func TestFaultAPIFaultsKeepTheOracleAndHonourRetryAfter(t *testing.T) {
	t.Parallel() // waits on the service, ClickHouse and rates, not the CPU (harness_test.go, "Parallel tests")
	for _, c := range []struct {
		name       string
		rate       float64
		dateForm   bool
		retryAfter string
	}{
		{"10% with Retry-After in seconds", 0.10, false, "1"},
		{"30% with Retry-After as an HTTP-date", 0.30, true, "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			per := c.rate / 4
			devices := 3
			if heavyFaults() {
				devices = 12
			}
			w := newFaultWorld(t, worldOpts{
				sim: fleetsim.Options{Devices: devices, Variables: 4, Points: 600, Span: 10 * 24 * time.Hour, Faults: fleetsim.Faults{
					ErrorRate: per, RateLimitRate: per, CutRate: per, SlowRate: per, SlowHeaders: 1500 * time.Millisecond,
					RetryAfter: c.retryAfter, RetryAfterDate: c.dateForm, Seed: 3,
				}},
				source: "page_size: 2\ntimeout: 500ms\nretry_max_elapsed: 60s",
				// A small limit makes ~220 requests (counts proving cut
				// frames included), enough for every fault kind to be served.
				sync: `schedule: "@every 1h"` + "\nrows_per_request: 30\nvariables_per_request: 2\nmax_in_flight: 4",
			})
			d := w.startDaemon(nil)
			d.awaitSuccessfulCycle(t, 3*time.Minute)
			body := d.metrics()
			if code := d.stop(t); code != 0 {
				t.Fatalf("the daemon exited %d on cancellation", code)
			}
			logs := d.stderr.String()
			n429, n5xx, nCut := w.counter(" 429"), w.counter(" 500")+w.counter(" 503"), w.counter("cut ")
			early := w.counter("early ")
			apiRetries, seriesRetries := metricSum(body, "fleetsync_api_retries_total"), metricSum(body, "fleetsync_series_request_retries_total")
			t.Logf("faults served: %d×429, %d×5xx, %d cut bodies, %d early retries; retries counted: %v by the API client, %v by the engine; %d requests in all",
				n429, n5xx, nCut, early, apiRetries, seriesRetries, w.allRequests())
			if n429 == 0 || n5xx == 0 || nCut == 0 {
				t.Fatalf("the fault mix did not happen (429 %d, 5xx %d, cut %d); make the fleet bigger", n429, n5xx, nCut)
			}
			if early != 0 {
				t.Fatalf("%d requests were sent again before the Retry-After deadline of their 429: %v", early, w.sim.Counters())
			}
			if apiRetries < float64(n429+n5xx) || apiRetries+seriesRetries < float64(n429+n5xx+nCut) {
				t.Fatalf("retries counted (%v API, %v engine) fall short of the faults served (%d×429, %d×5xx, %d cut)", apiRetries, seriesRetries, n429, n5xx, nCut)
			}
			if !strings.Contains(logs, "timeout") {
				t.Fatalf("no request timed out although %v of them had slow headers past source.timeout", per)
			}
			if strings.Contains(body, testToken) || strings.Contains(logs, testToken) {
				t.Fatal("the token appears in the metrics or the logs")
			}
			w.checkMarksCovered(nil)
			w.checkOracle()
		})
	}
}

// addBurst gives every variable n new points, one per millisecond after
// its newest, so that the next cycle has a full window to read.
func (w *world) addBurst(n int, value float64) {
	w.t.Helper()
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			pts := w.sim.Points(v.ID)
			if len(pts) == 0 {
				continue
			}
			from := pts[len(pts)-1].TimestampMs
			burst := make([]fleetsim.SimPoint, n)
			for i := range burst {
				burst[i] = fleetsim.SimPoint{TimestampMs: from + int64(i+1), Value: value + float64(i)}
			}
			if err := w.sim.AddPoints(v.ID, burst); err != nil {
				w.t.Fatal(err)
			}
		}
	}
}

func TestFaultPersistentErrorsFailOnlyTheAffectedVariables(t *testing.T) {
	w := newFaultWorld(t, worldOpts{
		sim:    fleetsim.Options{Devices: 3, Variables: 3, Points: 300, Span: 5 * 24 * time.Hour},
		source: "retry_max_elapsed: 2s",
		sync:   "variables_per_request: 1",
	})
	w.sync()
	labels := map[string][2]string{}
	var ids []string
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			labels[v.ID] = [2]string{d.Label, v.Label}
			ids = append(ids, v.ID)
		}
	}
	for _, c := range []struct {
		name   string
		bad    string
		faults fleetsim.Faults
	}{
		{"5xx", ids[1], fleetsim.Faults{ErrorRate: 1}},
		{"429", ids[4], fleetsim.Faults{RateLimitRate: 1, RetryAfter: "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w.t = t
			before := w.marks()
			added := w.addNewPoints(float64(len(c.name)), false, "")
			c.faults.Variables = []string{c.bad}
			w.sim.SetFaults(c.faults)
			defer w.sim.SetFaults(fleetsim.Faults{})
			start := time.Now()
			code, _, logs := w.cli(context.Background(), "sync", "--config", w.cfgPath)
			took := time.Since(start)
			last := lastLines(logs, 1)
			if code != 1 {
				t.Fatalf("exit %d with %s for one variable, want 1; log:\n%s", code, c.name, lastLines(logs, 10))
			}
			if took > 30*time.Second {
				t.Fatalf("the cycle took %s with a retry budget of 2s", took)
			}
			after := w.checkMarksCovered(before)
			loaded := w.loaded()
			for id, ts := range added {
				_, got := loaded[pointKey{id, ts}]
				switch {
				case id == c.bad && (after[id] != before[id] || got):
					t.Fatalf("the failing variable %s moved its mark %d -> %d (new point loaded: %v)", id, before[id], after[id], got)
				case id != c.bad && (after[id] < ts || !got):
					t.Fatalf("variable %s was not synced while another failed: mark %d, new point at %d loaded: %v", id, after[id], ts, got)
				}
			}
			// The failing variable's log line and the final error name the
			// device, the variable, the window and what to do next.
			lines := logLines(t, logs, "variable failed")
			if len(lines) != 1 {
				t.Fatalf("%d 'variable failed' log lines, want 1 for %s", len(lines), c.bad)
			}
			l := lines[0]
			want := labels[c.bad]
			window, _ := l["window"].(string)
			next, _ := l["next_step"].(string)
			if l["device"] != want[0] || l["variable"] != want[1] || l["variable_id"] != c.bad || !strings.Contains(window, "..") || next == "" {
				t.Fatalf("the failing variable's log line lacks the device %q, variable %q, id, window or next step: %v", want[0], want[1], l)
			}
			if !strings.Contains(last, want[0]+"/"+want[1]) || !strings.Contains(last, " window ") || !strings.Contains(last, next) {
				t.Fatalf("the final error does not name the variable, window and next step (%q): %q", next, last)
			}
			t.Logf("%s: exit 1 after %s; next step: %s", c.name, took.Round(time.Millisecond), next)
		})
	}
	w.t = t
	w.sync()
	w.checkOracle()
}

func TestFaultTokenRejectedTwiceIsAPermanentClearFailure(t *testing.T) {
	w := newFaultWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: 3, Variables: 3, Points: 400, Span: 5 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 15 * time.Millisecond}},
		sync: "variables_per_request: 1\nmax_in_flight: 1",
	})
	// The token expires once the cycle reads data, and no new one comes.
	expired := make(chan struct{})
	go func() {
		defer close(expired)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if w.dataRequests() >= 2 {
				w.sim.ExpireTokens()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	code, out, logs := w.cli(context.Background(), "sync", "--config", w.cfgPath)
	<-expired
	last := lastLines(logs, 1)
	if code != 1 {
		t.Fatalf("exit %d after the token expired for good, want 1; log:\n%s", code, lastLines(logs, 10))
	}
	if strings.Contains(out+logs, testToken) {
		t.Fatal("the token appears in fleetsync's output")
	}
	if !strings.Contains(last, "401") || !strings.Contains(last, "source.token_file") {
		t.Fatalf("the final error does not say the token was rejected and where to put a valid one: %q", last)
	}
	sums := logLines(t, logs, "cycle finished with failures")
	if len(sums) != 1 {
		t.Fatalf("no summary line of a cycle with failures:\n%s", lastLines(logs, 10))
	}
	failed := int(sums[0]["failed"].(float64))
	n401 := w.counter(" 401")
	t.Logf("%d variables failed with %d 401 answers; final error: %s", failed, n401, last)
	if failed == 0 || n401 > 2*failed {
		t.Fatalf("%d 401 answers for %d failed variables: a token rejected twice must not be tried again", n401, failed)
	}
	for _, l := range logLines(t, logs, "variable failed") {
		if next, _ := l["next_step"].(string); !strings.Contains(next, "source.token_file") {
			t.Fatalf("a variable failed with 401 without saying to fix the token: %v", l)
		}
	}
	prev := w.checkMarksCovered(nil)

	// With the token rejected from the start the walk fails: the whole
	// cycle fails, and says the same.
	code, out, logs = w.cli(context.Background(), "sync", "--config", w.cfgPath)
	last = lastLines(logs, 1)
	if code != 1 || !strings.Contains(last, "401") || !strings.Contains(last, "source.token_file") || strings.Contains(out+logs, testToken) {
		t.Fatalf("exit %d with a token rejected from the start (want 1, naming 401 and source.token_file): %q", code, last)
	}

	w.sim.AddToken("rotated-s3cr3t", fleetsim.TokenOrdinary, time.Hour)
	w.writeToken("rotated-s3cr3t")
	_, logs = w.sync()
	if strings.Contains(logs, "rotated-s3cr3t") {
		t.Fatal("the new token appears in the logs")
	}
	w.checkMarksCovered(prev)
	w.checkOracle()
}

const floorMovedMsg = "the service rejected a range as past its retention window; moving the retention floor forward (set source.retention to the account's real window to avoid this)"

// checkFloorMovedOnce asserts one cycle's log reports the moved floor once,
// and that the service answered a bounded number of 403s.
func (w *world) checkFloorMovedOnce(logs string, max403 int) {
	w.t.Helper()
	n403 := w.counter("/api/v1.6/", " 403")
	moved := logLines(w.t, logs, floorMovedMsg)
	sums := logLines(w.t, logs, "cycle finished")
	w.t.Logf("%d 403 answers; %d floor-moved warnings; summary: %v", n403, len(moved), sums)
	if n403 == 0 || n403 > max403 {
		w.t.Fatalf("%d 403003 answers in one cycle, want 1..%d: the floor must move in few steps", n403, max403)
	}
	if len(moved) != 1 {
		w.t.Fatalf("the skipped range was reported %d times, want once", len(moved))
	}
	if len(sums) != 1 || sums[0]["retention_floor_moved_to"] == nil {
		w.t.Fatalf("the cycle's summary does not report where the floor moved: %v", sums)
	}
}

func TestFaultRetentionShorterThanConfiguredMovesTheFloorWithoutLooping(t *testing.T) {
	realRetention := 20 * 24 * time.Hour
	w := newFaultWorld(t, worldOpts{
		sim:             fleetsim.Options{Devices: 3, Variables: 3, Points: 900, Span: 30 * 24 * time.Hour, Retention: realRetention},
		configRetention: 730 * 24 * time.Hour,
		sync:            "variables_per_request: 2",
	})
	// Marks older than any retention window, as a fleetsync that was off for
	// a long time would find them.
	if code, _, errs := w.cli(context.Background(), "migrate", "--config", w.cfgPath); code != 0 {
		t.Fatalf("migrate exited %d: %s", code, errs)
	}
	old := time.Now().Add(-800 * 24 * time.Hour)
	b, err := w.conn.PrepareBatch(context.Background(), fmt.Sprintf("INSERT INTO `%s`.sync_state (variable_id, hwm_ms, last_activity_ms, updated_at, version)", w.db))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			if err := b.Append(v.ID, old.UnixMilli(), int64(0), old.UTC(), uint64(old.UnixMilli())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	prev := w.marks()
	floorBefore := w.sim.RetentionFloor().UnixMilli()
	_, logs := w.sync()
	w.checkFloorMovedOnce(logs, 60)
	prev = w.checkMarksCovered(prev)
	now := time.Now().UnixMilli()
	n := w.checkLoadedBetween(floorBefore, w.sim.RetentionFloor().Add(w.margin+time.Minute).UnixMilli(), now, now, nil)
	t.Logf("%d points inside the account's real retention loaded exactly", n)

	// New data everywhere: the variable that had none in the window (its
	// mark still the old one) searches the floor once more, the others
	// start from their marks; after that no cycle is rejected.
	for cycle, max403 := range []int{60, 0} {
		w.sim.ResetCounters()
		w.addNewPoints(float64(7+cycle), false, "")
		_, logs := w.sync()
		n403 := w.counter("/api/v1.6/", " 403")
		t.Logf("cycle %d with new points: %d 403 answers", cycle+2, n403)
		if n403 > max403 || len(logLines(t, logs, floorMovedMsg)) > 1 {
			t.Fatalf("cycle %d was rejected %d times (at most %d): the 403003 loop continues across cycles", cycle+2, n403, max403)
		}
		prev = w.checkMarksCovered(prev)
		w.checkOracle()
	}
}

func TestFaultServiceClockADayAheadMovesTheFloorOnce(t *testing.T) {
	skew := 24 * time.Hour
	w := newFaultWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: 2, Variables: 3, Points: 500, Span: 10 * 24 * time.Hour, Now: func() time.Time { return time.Now().Add(skew) }},
		sync: "variables_per_request: 2",
	})
	// In fleetsync's time the service's window starts a day later than
	// the configured retention says.
	w.retention -= skew
	start := time.Now().UnixMilli()
	_, logs := w.sync()
	end := time.Now().UnixMilli()
	w.checkFloorMovedOnce(logs, 30)
	prev := w.checkMarksCovered(nil)
	// Points in fleetsync's future (the service's last day) wait for later cycles.
	n := w.checkLoadedBetween(0, w.sim.RetentionFloor().Add(w.margin+time.Minute).UnixMilli(), start, end, nil)
	t.Logf("%d points up to fleetsync's now loaded exactly; the service's clock is %s ahead", n, skew)

	w.sim.ResetCounters()
	_, logs = w.sync()
	if n := w.counter("/api/v1.6/", " 403"); n != 0 {
		t.Fatalf("the next cycle was rejected %d times:\n%s", n, logs)
	}
	w.checkMarksCovered(prev)
}

func TestFaultDeviceChurnDuringTheWalkSyncsEveryVariableOnce(t *testing.T) {
	w := newFaultWorld(t, worldOpts{
		sim:    fleetsim.Options{Devices: 8, Variables: 2, Points: 200, Span: 5 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 20 * time.Millisecond}},
		source: "page_size: 2",
		sync:   "max_in_flight: 2",
	})
	devices := w.sim.Devices()
	gone := pointSet{}
	forget := func(d fleetsim.Device) {
		ids := map[string]bool{}
		for _, v := range d.Variables {
			ids[v.ID] = true
		}
		for k, v := range w.sourcePoints(ids) {
			gone[k] = v
		}
	}
	// The oracle's lower bound: the configured floor plus the margin.
	mustFrom := func() int64 { return time.Now().Add(-w.retention).Add(w.margin + time.Minute).UnixMilli() }
	forget(devices[1])
	forget(devices[2])
	// Devices come and go while the device list is paged through: one
	// change after each page served.
	pages := func() int { return w.counter("GET /api/v2.0/devices/ 200") }
	churn := []func() error{
		func() error { return w.sim.DeleteDevice(devices[1].ID) },
		func() error {
			d, err := w.sim.AddDevice("churn-added-1", 2)
			if err == nil {
				err = w.sim.AddPoints(d.Variables[0].ID, []fleetsim.SimPoint{{TimestampMs: time.Now().Add(-time.Hour).UnixMilli(), Value: 1}})
			}
			return err
		},
		func() error { return w.sim.DeleteDevice(devices[2].ID) },
		func() error { _, err := w.sim.AddDevice("churn-added-2", 1); return err },
	}
	churned := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; i < len(churn); {
			if time.Now().After(deadline) {
				churned <- fmt.Errorf("only %d of %d changes made: the walk ended first", i, len(churn))
				return
			}
			if pages() > i {
				if err := churn[i](); err != nil {
					churned <- err
					return
				}
				i++
				continue
			}
			time.Sleep(time.Millisecond)
		}
		churned <- nil
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, _, logs := w.cli(ctx, "sync", "--config", w.cfgPath)
	if err := <-churned; err != nil {
		t.Fatalf("churn: %v", err)
	}
	if code != 0 {
		t.Fatalf("the cycle with devices added and deleted during the walk exited %d, want 0: %s", code, lastLines(logs, 3))
	}
	prev := w.checkMarksCovered(nil)
	now := time.Now().UnixMilli()
	n := w.checkLoadedBetween(0, mustFrom(), now, now, gone)
	t.Logf("walk churn: %d points of the devices that exist loaded exactly, the deleted ones' points kept", n)

	// A device deleted after the walk, before its data is read: the
	// request naming it fails, and only its variables fail with it.
	victim := devices[3]
	forget(victim)
	w.addNewPoints(3, false, "")
	h := w.gate.holdNext(-1, isPath("POST", "/api/v1.6/data/raw/series"))
	var stderr syncBuffer
	wait := w.startSync(nil, &stderr)
	h.await(t, 60*time.Second, "the first raw-series request")
	if err := w.sim.DeleteDevice(victim.ID); err != nil {
		t.Fatal(err)
	}
	h.free()
	code = wait(2 * time.Minute)
	logs = stderr.String()
	failedLines := logLines(t, logs, "variable failed")
	t.Logf("data churn: exit %d, %d variables failed: %s", code, len(failedLines), lastLines(logs, 1))
	if code != 1 || len(failedLines) != len(victim.Variables) {
		t.Fatalf("exit %d with %d variables failed; want 1 with the %d variables of the deleted device only:\n%s", code, len(failedLines), len(victim.Variables), lastLines(logs, 8))
	}
	for _, l := range failedLines {
		if l["device"] != victim.Label {
			t.Fatalf("a variable of another device failed: %v", l)
		}
	}
	w.checkMarksCovered(prev)
	now = time.Now().UnixMilli()
	w.checkLoadedBetween(0, mustFrom(), now, now, gone)
	// The next cycle no longer lists the deleted device and finishes.
	w.sync()
}

const leaseHeldMsg = "another sync is running"

func TestFaultOverlappingSyncsNeverDuplicateNorMoveMarksBack(t *testing.T) {
	w := newFaultWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: 3, Variables: 4, Points: 800, Span: 10 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 5 * time.Millisecond}},
		sync: "rows_per_request: 300\nvariables_per_request: 2\nmax_in_flight: 2",
	})
	prev := map[string]int64{}
	// checkPair checks the exit of overlapping processes: each finished (0)
	// or stepped aside with a clear message (1), and at least one of them,
	// or one of the others beside them (worked), did the cycle.
	checkPair := func(round string, worked int, procs ...*proc) {
		t.Helper()
		for i, p := range procs {
			code := p.wait(t, 2*time.Minute)
			last := lastLines(p.stderr.String(), 1)
			t.Logf("%s: process %d exited %d: %.160s", round, i, code, last)
			switch {
			case code == 0:
				worked++
			case code == 1 && strings.Contains(last, leaseHeldMsg):
			default:
				t.Fatalf("%s: process %d exited %d without saying another sync holds the lease:\n%s", round, i, code, lastLines(p.stderr.String(), 8))
			}
		}
		if worked == 0 {
			t.Fatalf("%s: no overlapping sync worked", round)
		}
	}
	for round := range 3 {
		if round > 0 {
			w.addNewPoints(float64(round), false, "")
		}
		a := startBinary(t, nil, "sync", "--config", w.cfgPath)
		b := startBinary(t, nil, "sync", "--config", w.cfgPath)
		checkPair(fmt.Sprintf("round %d", round), 0, a, b)
		prev = w.checkMarksCovered(prev)
		w.checkOracle()
	}

	// A daemon beside a manual run.
	w.addNewPoints(10, false, "")
	// Whichever of the two takes the lease first does the cycle, and the
	// other steps aside: the daemon's first cycle counts as much as the
	// manual run, so the outcome does not depend on which wins.
	d := startBinary(t, nil, "run", "--config", w.cfgPath)
	m := startBinary(t, nil, "sync", "--config", w.cfgPath)
	poll(t, 2*time.Minute, "the daemon's first cycle to end", func() bool {
		return strings.Contains(d.stderr.String(), `"msg":"cycle finished"`) || strings.Contains(d.stderr.String(), `"msg":"cycle failed"`)
	})
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("the daemon exited %d on SIGTERM", code)
	}
	daemonWorked := 0
	switch logs := d.stderr.String(); {
	case strings.Contains(logs, `"msg":"cycle finished"`):
		daemonWorked = 1
	case !strings.Contains(logs, leaseHeldMsg):
		t.Fatalf("the daemon's cycle failed for another reason than the lease:\n%s", lastLines(logs, 8))
	}
	checkPair("manual run beside the daemon", daemonWorked, m)
	w.checkMarksCovered(prev)
	w.checkOracle()
}

func TestFaultSigtermToRunMidCycleExitsZeroAndTheNextRunResumes(t *testing.T) {
	w := newFaultWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: 3, Variables: 4, Points: 2000, Span: 10 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 25 * time.Millisecond}},
		sync: `schedule: "@every 1h"` + "\nrows_per_request: 400\nvariables_per_request: 1\nmax_in_flight: 1\nbatch_rows: 1000",
	})
	total := len(w.expected())
	d := startBinary(t, nil, "run", "--config", w.cfgPath)
	// Mid-cycle: a full cycle makes about 180 raw-series requests.
	poll(t, time.Minute, "the cycle to be a third through", func() bool { return w.dataRequests() >= 60 })
	sent := time.Now()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	code := d.wait(t, 60*time.Second)
	took := time.Since(sent)
	logs := d.stderr.String()
	t.Logf("SIGTERM mid-cycle: exit %d after %s", code, took.Round(time.Millisecond))
	if code != 0 {
		t.Fatalf("the daemon exited %d on SIGTERM, want 0:\n%s", code, lastLines(logs, 8))
	}
	if took > 20*time.Second {
		t.Fatalf("the daemon took %s to stop; the pod's grace period is 60s and it should need far less", took)
	}
	if !strings.Contains(logs, "signal received") || !strings.Contains(logs, "fleetsync daemon stopped") {
		t.Fatalf("the daemon did not log its orderly stop:\n%s", lastLines(logs, 8))
	}
	prev := w.checkMarksCovered(nil)
	loaded := len(w.loaded())
	if len(prev) == 0 || loaded >= total {
		t.Fatalf("the signal did not land mid-cycle: %d marks, %d of %d points loaded", len(prev), loaded, total)
	}

	// The next run resumes from the marks: it reads less than everything.
	w.sim.ResetCounters()
	d2 := startBinary(t, nil, "run", "--config", w.cfgPath)
	poll(t, 2*time.Minute, "the next run's cycle to finish", func() bool {
		return strings.Contains(d2.stderr.String(), `"msg":"cycle finished"`)
	})
	_ = d2.cmd.Process.Signal(syscall.SIGTERM)
	if code := d2.wait(t, time.Minute); code != 0 {
		t.Fatalf("the next run exited %d on SIGTERM", code)
	}
	sums := logLines(t, d2.stderr.String(), "cycle finished")
	points := int(sums[0]["points"].(float64))
	t.Logf("the next run loaded %d points; %d were loaded before the signal, %d in all", points, loaded, total)
	if points >= total {
		t.Fatalf("the next run re-read everything (%d points) instead of resuming from the marks", points)
	}
	w.checkMarksCovered(prev)
	w.checkOracle()
}
