package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

// freeAddr is a loopback address for a server the test starts: a port
// below the ephemeral range, so no outgoing connection takes it before the
// server binds it.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := chserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue finds the value of a sample whose line starts with prefix
// (the metric name with an optional label set).
func metricValue(text, prefix string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			return v, err == nil
		}
	}
	return 0, false
}

func (w *world) countLoaded() float64 {
	w.t.Helper()
	var n uint64
	if err := w.conn.QueryRow(context.Background(), fmt.Sprintf("SELECT count() FROM `%s`.datapoints FINAL", w.db)).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return float64(n)
}

// startPushgateway starts a Pushgateway of this test's own on a free
// loopback port and returns its address and a stop function (by its PID,
// idempotent; also called when the test ends).
func startPushgateway(t *testing.T) (addr string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("prometheus-pushgateway")
	if err != nil {
		t.Fatalf("prometheus-pushgateway is not installed (apt-get install -y prometheus-pushgateway; .ci/run does it): %v", err)
	}
	// Another process can bind the port between its pick and the
	// gateway's bind: a gateway that exits so is started again elsewhere.
	for attempt := 1; ; attempt++ {
		addr = freeAddr(t)
		// Debian's default persists to /var/lib/prometheus/pushgateway.data,
		// shared by every run on the machine: keep this one's groups in memory.
		pg := exec.Command(bin, "--web.listen-address="+addr, "--persistence.file=")
		var out syncBuffer
		pg.Stdout, pg.Stderr = &out, &out
		if err := pg.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = pg.Wait(); close(exited) }()
		var once sync.Once
		stop = func() { once.Do(func() { _ = pg.Process.Kill(); <-exited }) }
		t.Cleanup(stop)
		ready, gone := false, false
		poll(t, 20*time.Second, "the Pushgateway to answer or exit", func() bool {
			select {
			case <-exited:
				gone = true
				return true
			default:
			}
			c, _ := httpGet("http://" + addr + "/-/ready")
			ready = c == 200
			return ready
		})
		if ready {
			return addr, stop
		}
		if !gone || !strings.Contains(out.String(), "address already in use") || attempt == 3 {
			t.Fatalf("the Pushgateway on %s exited during start:\n%s", addr, out.String())
		}
	}
}

// pushTo makes the world's configuration push its metrics to the
// Pushgateway at addr as instance e2e-test, and returns the configuration.
func (w *world) pushTo(addr string) []byte {
	w.t.Helper()
	cfg, _ := os.ReadFile(w.cfgPath)
	cfg = bytes.Replace(cfg, []byte(`  listen: "127.0.0.1:0"`), []byte(`  listen: "127.0.0.1:0"
  pushgateway_url: http://`+addr+`
  instance: e2e-test`), 1)
	if err := os.WriteFile(w.cfgPath, cfg, 0o600); err != nil {
		w.t.Fatal(err)
	}
	return cfg
}

func TestSyncPushesMetricsToPushgateway(t *testing.T) {
	addr, stopPushgateway := startPushgateway(t)

	w := newWorld(t, worldOpts{})
	w.pushTo(addr)
	w.sync()
	_, body := httpGet("http://" + addr + "/metrics")
	loaded, ok := metricValue(body, `fleetsync_points_loaded_total{instance="e2e-test",job="fleetsync"}`)
	if !ok {
		t.Fatalf("fleetsync_points_loaded_total was not pushed; the Pushgateway has:\n%s", lastLines(grepLines(body, "fleetsync_"), 30))
	}
	if want := w.countLoaded(); loaded != want {
		t.Fatalf("pushed fleetsync_points_loaded_total = %v, the warehouse holds %v points", loaded, want)
	}
	if v, ok := metricValue(body, `fleetsync_last_cycle_success{instance="e2e-test",job="fleetsync"}`); !ok || v != 1 {
		t.Fatalf("fleetsync_last_cycle_success = %v (present %v), want 1", v, ok)
	}
	if v, ok := metricValue(body, `fleetsync_api_requests_total{code="2xx",endpoint="raw_series",instance="e2e-test",job="fleetsync"}`); !ok || v < 1 {
		t.Fatalf("raw-series request count %v (present %v), want >= 1:\n%s", v, ok, grepLines(body, "fleetsync_api_requests_total"))
	}
	if strings.Contains(body, testToken) {
		t.Fatal("the token appears in the pushed metrics")
	}

	lastSuccess, _ := metricValue(body, `fleetsync_last_success_timestamp_seconds{instance="e2e-test",job="fleetsync"}`)
	if v, ok := metricValue(body, `fleetsync_schedule_interval_seconds{instance="e2e-test",job="fleetsync"}`); !ok || v != 300 {
		t.Fatalf("fleetsync_schedule_interval_seconds = %v (present %v), want 300 for */5", v, ok)
	}

	// A failed run pushes its failure but keeps the last success time, so the
	// "no recent success" alert measures from the last good run.
	w.writeToken("wrong-token")
	if code, _, _ := w.cli(context.Background(), "sync", "--config", w.cfgPath); code != 1 {
		t.Fatalf("a sync with a wrong token exited %d, want 1", code)
	}
	w.writeToken(testToken)
	_, body = httpGet("http://" + addr + "/metrics")
	if v, _ := metricValue(body, `fleetsync_last_cycle_success{instance="e2e-test",job="fleetsync"}`); v != 0 {
		t.Fatalf("after a failed run fleetsync_last_cycle_success = %v, want 0", v)
	}
	if v, _ := metricValue(body, `fleetsync_last_success_timestamp_seconds{instance="e2e-test",job="fleetsync"}`); v != lastSuccess || v == 0 {
		t.Fatalf("after a failed run the pushed last success is %v, want the earlier %v", v, lastSuccess)
	}

	// A Pushgateway that is gone does not fail a good sync.
	stopPushgateway()
	w.sync()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var metricsURLRe = regexp.MustCompile(`"metrics":"(http://[^"]+)/metrics"`)

func TestRunServesMetricsHealthAndReadinessWhileCycling(t *testing.T) {
	w := newWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: 3, Variables: 3, Points: 300, Span: 5 * 24 * time.Hour, Faults: fleetsim.Faults{Latency: 40 * time.Millisecond}},
		sync: "max_in_flight: 1\nvariables_per_request: 1\nschedule: \"@every 1h\"",
	})
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "--config", w.cfgPath}, io.Discard, &stderr, nil) }()
	var base string
	poll(t, 20*time.Second, "the daemon's start line", func() bool {
		m := metricsURLRe.FindStringSubmatch(stderr.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	// Scrape while the first cycle runs: requests are being counted.
	var body string
	poll(t, 20*time.Second, "API requests to show in /metrics mid-cycle", func() bool {
		_, body = httpGet(base + "/metrics")
		v, ok := metricValue(body, `fleetsync_api_requests_total{code="2xx",endpoint="raw_series"}`)
		return ok && v >= 1
	})
	// The same scrape shows the cycle still running: none has ended yet.
	if v, ok := metricValue(body, `fleetsync_cycles_total{result="success"}`); ok && v != 0 {
		t.Fatalf("the scrape that saw the first raw-series request also counts %v finished cycles: the cycle ended before it was scraped", v)
	}
	_, body = httpGet(base + "/metrics")
	if v, ok := metricValue(body, "fleetsync_last_cycle_start_timestamp_seconds"); !ok || v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("fleetsync_last_cycle_start_timestamp_seconds = %v (present %v) during the first cycle", v, ok)
	}
	if code, _ := httpGet(base + "/healthz"); code != 200 {
		t.Fatalf("/healthz answered %d", code)
	}
	poll(t, 60*time.Second, "the first cycle to succeed", func() bool {
		_, body := httpGet(base + "/metrics")
		v, ok := metricValue(body, `fleetsync_cycles_total{result="success"}`)
		return ok && v == 1
	})
	if code, body := httpGet(base + "/readyz"); code != 200 {
		t.Fatalf("/readyz answered %d after a good cycle: %s", code, body)
	}
	_, body = httpGet(base + "/metrics")
	for _, name := range []string{"fleetsync_sync_lag_max_seconds", "fleetsync_variables_lagging", "fleetsync_schedule_interval_seconds 3600",
		"fleetsync_last_success_timestamp_seconds", "fleetsync_points_loaded_total", "fleetsync_clickhouse_insert_duration_seconds_count",
		"fleetsync_api_request_duration_seconds_bucket", "fleetsync_build_info"} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if strings.Contains(body, testToken) || strings.Contains(stderr.String(), testToken) {
		t.Fatal("the token appears in metrics or logs")
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exited %d on cancellation, want 0; logs:\n%s", code, lastLines(stderr.String(), 10))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30s of its context being cancelled")
	}
	w.checkOracle()
}

func TestStatusShowsLagWorstFirst(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.sync()
	d := w.sim.Devices()[1]
	code, out, errs := w.cli(context.Background(), "status", "--config", w.cfgPath, "--json")
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, errs)
	}
	var st struct {
		Variables int `json:"variables"`
		WithMark  int `json:"with_mark"`
		Worst     []struct {
			DeviceLabel   string  `json:"device_label"`
			VariableLabel string  `json:"variable_label"`
			LagSeconds    float64 `json:"lag_seconds"`
		} `json:"worst"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out)
	}
	total := 0
	for _, d := range w.sim.Devices() {
		total += len(d.Variables)
	}
	if st.Variables != total || st.WithMark != total {
		t.Fatalf("status reports %d variables, %d with a mark; the fleet has %d", st.Variables, st.WithMark, total)
	}
	for i := 1; i < len(st.Worst); i++ {
		if st.Worst[i].LagSeconds > st.Worst[i-1].LagSeconds {
			t.Fatalf("status is not worst first: %+v", st.Worst)
		}
	}
	// Right after a complete sync nothing lags (pipeline's TestLag covers the
	// arithmetic of lagging variables).
	if st.Worst[0].LagSeconds != 0 {
		t.Fatalf("a variable lags right after a complete sync: %+v", st.Worst[0])
	}
	code, out, _ = w.cli(context.Background(), "status", "--config", w.cfgPath)
	if code != 0 || !strings.Contains(out, "DEVICE") || !strings.Contains(out, d.Label) {
		t.Fatalf("status table (exit %d) lacks the header or device %q:\n%s", code, d.Label, out)
	}
}
