package main

// The harness of every test that runs fleetsync against a source and a
// warehouse: the end-to-end tests, the fault suite and the cluster tests
// build their world here (a fleetsim served over HTTP behind a gate, a
// database on the shared ClickHouse, a dedicated server or the local
// cluster, a token file, a configuration), run fleetsync against it (in
// process, or as a binary that can be killed) and check what landed
// against what the source holds (the oracle, harness_oracle_test.go). What
// only one suite needs builds on it: the fault suite's holds and ClickHouse
// proxy (faults_inject_test.go), the cluster tests' shards
// (cluster_world_test.go).
//
// Parallel tests. A world is its own: its fleetsim, its database (or its
// own server), its files, its metrics listener on a free port. The longest
// tests spend their time waiting (a token's rate limit, retries, the
// service's latency, ClickHouse merging), not computing, so they call
// t.Parallel and `make test` runs them four at a time (-parallel 4),
// without -race: the engine's goroutines are raced in pipeline's own tests
// and the simulation. A test whose verdict is a wall-clock bound on work
// the CPU does (an incremental cycle over ten thousand variables within
// 15 s, the cautious start's few seconds) stays sequential: Go runs the
// sequential tests first, alone.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.StopShared()
	chtest.StopCluster()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// testToken is every world's API token; it must never appear in
// fleetsync's output.
const testToken = "test-token-s3cr3t"

// worldOpts shape a world. Each section string holds YAML lines ("key:
// value", a nested key's own lines indented below it) that replace the
// section's default of the same key or add to the section.
type worldOpts struct {
	// sim is the fleet; a zero Seed, or a zero Devices, takes the suite's
	// (newWorld, newFaultWorld, newClusterWorld).
	sim                           fleetsim.Options
	source, sync, clickhouse, log string
	// server is a dedicated ClickHouse, plain or TLS; nil means the shared one.
	server *chserver.Server
	// cluster puts the world's database on a local cluster (newClusterWorld
	// takes the shared one when it is nil).
	cluster *chserver.Cluster
	// configRetention is source.retention when it must differ from the
	// account's real one (sim.Retention); zero means the same.
	configRetention time.Duration
	// proxy puts a holdable TCP proxy between fleetsync and ClickHouse.
	proxy bool
}

// configLines are YAML lines for each section of a configuration, as in
// worldOpts.
type configLines struct{ source, sync, clickhouse, log string }

// world is one test's source, warehouse and configuration.
type world struct {
	// t is the test a failed check fails; a test points it at a subtest
	// while that runs. root is the test that owns the world's resources.
	t, root testing.TB
	sim     *fleetsim.Sim
	// http serves sim through gate, which can hold a request.
	http *httptest.Server
	gate *gate
	// srv is the server the test's connection (conn) talks to: on a
	// cluster (cl), its first node. proxy, when set, stands between
	// fleetsync and srv.
	srv     *chserver.Server
	cl      *chserver.Cluster
	proxy   *chProxy
	conn    driver.Conn
	chAddr  string
	db      string
	dir     string
	cfgPath string
	// tokenFile holds testToken (writeToken changes it); a cluster
	// world's shards each read their own beside it (shardToken).
	tokenFile string
	// retention is the account's window, margin the one fleetsync keeps
	// from its floor; the oracle expects every point above both.
	retention, margin time.Duration
	// cfgRetention is source.retention as configured.
	cfgRetention time.Duration
	// lines are the world's own configuration lines (worldOpts'), over
	// the defaults in every file it writes.
	lines configLines
	// secrets must never appear in anything fleetsync prints.
	secrets []string
}

// newWorld is a world of the end-to-end tests: unless sized, seed 7's 4
// devices × 4 variables × 300 points over 30 days, on the shared server.
func newWorld(t testing.TB, o worldOpts) *world {
	t.Helper()
	return startWorld(t, o, fleetsim.Options{Seed: 7, Devices: 4, Variables: 4, Points: 300, Span: 30 * 24 * time.Hour})
}

// newFaultWorld is a world of the fault suite: unless sized, seed 11's 3
// devices × 4 variables × 400 points over 10 days.
func newFaultWorld(t testing.TB, o worldOpts) *world {
	t.Helper()
	return startWorld(t, o, fleetsim.Options{Seed: 11, Devices: 3, Variables: 4, Points: 400, Span: 10 * 24 * time.Hour})
}

// newClusterWorld is a world whose database is on a local cluster (the
// shared one unless o.cluster is set), synced by shards that each read
// their own token (shardConfig): unless sized, seed 11's 4 devices × 4
// variables × 300 points over 30 days. Its retries outlast a replica's
// restart, and a lease left by a killed shard lapses within the test.
func newClusterWorld(t testing.TB, o worldOpts) *world {
	t.Helper()
	if o.cluster == nil {
		o.cluster = chtest.Cluster(t)
	}
	o.source = "retry_max_elapsed: 30s\n" + o.source
	// The cluster tests hold every point, late and rewritten ones
	// included, to land in the next cycle through the cluster's changes:
	// idle_recheck 1ms makes every cycle re-read each variable's lookback.
	// The reads after the mark between re-reads are the engine's, the same
	// on one server or many (pipeline's tests, the simulation, and the
	// end-to-end tests on one server).
	o.sync = "lease_ttl: 30s\nidle_recheck: 1ms\n" + o.sync
	o.clickhouse = "retry_max_elapsed: 60s\n" + o.clickhouse
	return startWorld(t, o, fleetsim.Options{Seed: 11, Devices: 4, Variables: 4, Points: 300, Span: 30 * 24 * time.Hour})
}

// startWorld builds the world of o, whose fleet takes fleet's seed and size
// where o leaves them zero.
func startWorld(t testing.TB, o worldOpts, fleet fleetsim.Options) *world {
	t.Helper()
	if o.sim.Seed == 0 {
		o.sim.Seed = fleet.Seed
	}
	if o.sim.Devices == 0 {
		o.sim.Devices, o.sim.Variables, o.sim.Points, o.sim.Span = fleet.Devices, fleet.Variables, fleet.Points, fleet.Span
	}
	w := &world{t: t, root: t, dir: t.TempDir(), retention: 730 * 24 * time.Hour, margin: time.Hour,
		lines: configLines{o.source, o.sync, o.clickhouse, o.log}, secrets: []string{testToken}}
	if o.sim.Retention != 0 {
		w.retention = o.sim.Retention
	}
	w.cfgRetention = w.retention
	if o.configRetention != 0 {
		w.cfgRetention = o.configRetention
	}
	o.sim.Tokens = append([]string{testToken}, o.sim.Tokens...)
	if o.cluster != nil {
		w.cl, w.srv, w.db = o.cluster, o.cluster.Nodes[0][0], chtest.ClusterDatabase(t, o.cluster)
		for i := range 4 {
			o.sim.Tokens = append(o.sim.Tokens, shardToken(i))
			w.secrets = append(w.secrets, shardToken(i))
			if err := os.WriteFile(filepath.Join(w.dir, fmt.Sprintf("token-%d", i)), []byte(shardToken(i)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		w.srv = o.server
		if w.srv == nil {
			w.srv = chtest.Shared(t)
		}
		w.db = chtest.NewDatabase(t, w.srv)
	}
	w.chAddr = w.srv.Addr()
	sim, err := fleetsim.New(o.sim)
	if err != nil {
		t.Fatalf("fleetsim: %v", err)
	}
	w.sim = sim
	t.Cleanup(sim.Close)
	w.gate = &gate{next: sim}
	w.http = httptest.NewServer(w.gate)
	t.Cleanup(func() { w.gate.releaseAll(); w.http.Close() })
	w.tokenFile = filepath.Join(w.dir, "token")
	w.writeToken(testToken)
	if o.proxy {
		w.proxy = startCHProxy(t, w.chAddr)
	}
	w.cfgPath = w.writeConfig(filepath.Join(w.dir, "fleetsync.yaml"), configLines{})
	w.conn = openConn(t, w.srv)
	return w
}

// shardToken is the API token of a cluster world's shard i: each its own.
func shardToken(i int) string { return fmt.Sprintf("shard-%d-token-s3cr3t", i) }

// openConn opens a connection to srv (over TLS when srv speaks it), closed
// when the test ends.
func openConn(t testing.TB, srv *chserver.Server) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{srv.Addr()}, TLS: srv.TLSClient(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// reconnect replaces the test's own connection, after a ClickHouse restart
// left the pooled ones broken.
func (w *world) reconnect() { w.conn = openConn(w.root, w.srv) }

// writeConfig writes at path the world's configuration, with more lines
// over the world's own, and returns path. The defaults are those of a
// quick test: fleetsim has no rate limit unless a test sets one, so no
// cautious start (ratelimit_test.go sets the default back), and short
// retry budgets.
func (w *world) writeConfig(path string, more configLines) string {
	w.t.Helper()
	addr := w.chAddr
	if w.proxy != nil {
		addr = w.proxy.addr()
	}
	clickhouse := fmt.Sprintf("addr: [%q]\ndatabase: %s\nretry_max_elapsed: 10s", addr, w.db)
	if w.cl != nil {
		addrs := make([]string, 0, 4)
		for _, a := range w.cl.Addrs() {
			addrs = append(addrs, fmt.Sprintf("%q", a))
		}
		clickhouse = fmt.Sprintf("addr: [%s]\ndatabase: %s\ncluster: %s\nretry_max_elapsed: 10s", strings.Join(addrs, ", "), w.db, w.cl.Name())
	}
	cfg := "source:\n" + section(fmt.Sprintf("base_url: %s\ntoken_file: %s\nretention: %dh\nretry_max_elapsed: 20s\ninitial_requests_per_second: 0",
		w.http.URL, w.tokenFile, int(w.cfgRetention.Hours())), w.lines.source, more.source) +
		"sync:\n" + section("lookback: 1h\nbatch_age: 200ms", w.lines.sync, more.sync) +
		"clickhouse:\n" + section(clickhouse, w.lines.clickhouse, more.clickhouse) +
		"metrics:\n" + section(`listen: "127.0.0.1:0"`) +
		"log:\n" + section("format: json\nlevel: info", w.lines.log, more.log)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// configure rewrites the world's configuration (cfgPath) with more lines
// over its own.
func (w *world) configure(more configLines) { w.writeConfig(w.cfgPath, more) }

// editConfig rewrites the world's configuration file by fn.
func (w *world) editConfig(fn func(string) string) {
	w.t.Helper()
	b, err := os.ReadFile(w.cfgPath)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(w.cfgPath, []byte(fn(string(b))), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// section renders the YAML lines of each layer indented under a section;
// a key of a later layer replaces an earlier one's, lines indented below
// it included.
func section(layers ...string) string {
	var keys []string
	entries := map[string]string{}
	for _, layer := range layers {
		key := ""
		for _, l := range strings.Split(layer, "\n") {
			switch {
			case strings.TrimSpace(l) == "":
			case l[0] == ' ' || l[0] == '\t':
				entries[key] += "\n" + l
			default:
				k, _, _ := strings.Cut(l, ":")
				key = strings.TrimSpace(k)
				if _, ok := entries[key]; !ok {
					keys = append(keys, key)
				}
				entries[key] = l
			}
		}
	}
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(indent(entries[k]))
	}
	return b.String()
}

// indent indents every line of s by two spaces.
func indent(s string) string {
	if s == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// writeToken replaces the token file's content as Kubernetes does: a new
// file renamed over the old.
func (w *world) writeToken(tok string) {
	w.t.Helper()
	tmp := w.tokenFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Rename(tmp, w.tokenFile); err != nil {
		w.t.Fatal(err)
	}
}

// cli runs fleetsync in process and returns its exit status and output.
func (w *world) cli(ctx context.Context, args ...string) (int, string, string) {
	return w.cliEnv(ctx, nil, args...)
}

// cliEnv runs fleetsync in process with environ as its environment.
func (w *world) cliEnv(ctx context.Context, environ []string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb, environ)
	return code, out.String(), errb.String()
}

// syncWithEnv runs one `fleetsync sync` of the world's configuration with
// environ, checks that no secret is in its output, and returns its exit
// status and stderr.
func (w *world) syncWithEnv(environ []string) (int, string) {
	w.t.Helper()
	code, out, errs := w.cliEnv(context.Background(), environ, "sync", "--config", w.cfgPath)
	w.checkNoSecret(out + errs)
	return code, errs
}

// sync runs one `fleetsync sync`, fails the test unless it exits 0 with no
// secret in its output, and returns its stdout and stderr.
func (w *world) sync() (string, string) {
	w.t.Helper()
	code, out, errs := w.cli(context.Background(), "sync", "--config", w.cfgPath)
	if code != 0 {
		w.t.Fatalf("fleetsync sync exited %d\nstdout: %s\nstderr: %s", code, out, lastLines(errs, 20))
	}
	w.checkNoSecret(out + errs)
	return out, errs
}

// checkNoSecret fails the test when text holds one of the world's secrets.
func (w *world) checkNoSecret(text string) {
	w.t.Helper()
	for _, s := range w.secrets {
		if strings.Contains(text, s) {
			w.t.Fatalf("a secret (%.6s...) appears in fleetsync's output", s)
		}
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logLines returns the JSON log lines whose msg is msg.
func logLines(t testing.TB, logs, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(logs, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, l)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// cycleSummary is the fields of the "cycle finished" log line.
func cycleSummary(t testing.TB, logs string) map[string]any {
	t.Helper()
	sums := logLines(t, logs, "cycle finished")
	if len(sums) == 0 {
		t.Fatalf("no \"cycle finished\" line in the logs:\n%s", lastLines(logs, 10))
	}
	return sums[0]
}

// poll calls fn until it returns true or the deadline passes.
func poll(t testing.TB, within time.Duration, what string, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a poller.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// binDir holds the fleetsync binary built once for the tests that need a
// real process (SIGKILL, SIGTERM, two processes at once).
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

// fleetsyncBinary builds the binary on first use and returns its path.
func fleetsyncBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binError = os.MkdirTemp("", "fleetsync-bin-")
		if binError != nil {
			return
		}
		binPath = filepath.Join(binDir, "fleetsync")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binError = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}

// proc is a fleetsync binary started by a test.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// childEnv is the environment of a fleetsync binary a test starts: the
// test's own, less its FLEETSYNC_ variables (FLEETSYNC_FAULTS_HEAVY,
// FLEETSYNC_TEST_CLICKHOUSE_ADDR, ...), which are not configuration keys
// and which fleetsync rejects as unknown, plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEETSYNC_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// startBinary starts the fleetsync binary with args and extra environment;
// it is killed when the test ends, if still running.
func startBinary(t testing.TB, environ []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(fleetsyncBinary(t), args...)
	cmd.Env = childEnv(environ...)
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = io.Discard
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// kill sends SIGKILL to the process and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// wait waits for the process to exit within d and returns its exit status.
func (p *proc) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("fleetsync %v did not exit within %s; its log ends:\n%s", p.cmd.Args[1:], d, lastLines(p.stderr.String(), 15))
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("wait: %v", p.err)
	}
	return 0
}
