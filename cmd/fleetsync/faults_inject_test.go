package main

// The fault suite's harness: a world whose configuration can be shaped per
// section, whose fleetsim sits behind a gate that can hold one request (to
// kill fleetsync while it waits), and whose ClickHouse can sit behind a TCP
// proxy that can hold one statement (to kill fleetsync mid-INSERT or just
// before it commits its marks). See docs/reliability.md.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
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

// heavyFaults reports whether the heavier fault variants run
// (FLEETSYNC_FAULTS_HEAVY=1, set by `make test-faults`).
func heavyFaults() bool { return os.Getenv("FLEETSYNC_FAULTS_HEAVY") == "1" }

// faultOpts shape a fault world. Each section string holds YAML lines
// ("key: value") that replace or add to the section's defaults.
type faultOpts struct {
	sim        fleetsim.Options
	source     string
	sync       string
	clickhouse string
	// server is a dedicated ClickHouse; nil means the shared one.
	server *chserver.Server
	// configRetention is source.retention when it must differ from the
	// account's real one (sim.Retention); zero means the same.
	configRetention time.Duration
	// proxy puts a holdable TCP proxy between fleetsync and ClickHouse.
	proxy bool
}

// faultWorld is a world with the fault suite's extra controls.
type faultWorld struct {
	*world
	gate  *gate
	proxy *chProxy
	srv   *chserver.Server
	// root is the test that owns the world's resources (w.t may be a subtest).
	root *testing.T
}

func newFaultWorld(t *testing.T, o faultOpts) *faultWorld {
	t.Helper()
	srv := o.server
	if srv == nil {
		srv = chtest.Shared(t)
	}
	w := startWorld(t, srv, o.sim, fleetsim.Options{Seed: 11, Devices: 3, Variables: 4, Points: 400, Span: 10 * 24 * time.Hour})
	fw := &faultWorld{world: w, gate: &gate{next: w.sim}, srv: srv, root: t}
	w.http = httptest.NewServer(fw.gate)
	t.Cleanup(func() { fw.gate.releaseAll(); w.http.Close() })

	chAddr := w.chAddr
	if o.proxy {
		fw.proxy = startCHProxy(t, w.chAddr)
		chAddr = fw.proxy.addr()
	}
	cfgRetention := w.retention
	if o.configRetention != 0 {
		cfgRetention = o.configRetention
	}
	cfg := "source:\n" + section([]string{
		"base_url: " + w.http.URL,
		"token_file: " + w.tokenFile,
		fmt.Sprintf("retention: %dh", int(cfgRetention.Hours())),
		"retry_max_elapsed: 20s",
		// fleetsim has no rate limit unless a test sets one: no cautious
		// start (ratelimit_test.go sets the default back).
		"initial_requests_per_second: 0",
	}, o.source) + "sync:\n" + section([]string{
		"lookback: 1h",
		"batch_age: 200ms",
	}, o.sync) + "clickhouse:\n" + section([]string{
		fmt.Sprintf("addr: [%q]", chAddr),
		"database: " + w.db,
		"retry_max_elapsed: 10s",
	}, o.clickhouse) + "metrics:\n" + section([]string{
		`listen: "127.0.0.1:0"`,
	}, "") + "log:\n" + section([]string{"format: json", "level: info"}, "")
	w.cfgPath = filepath.Join(w.dir, "fleetsync.yaml")
	if err := os.WriteFile(w.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	w.conn = openConn(t, w.chAddr)
	return fw
}

// section renders YAML lines indented under a section; extra lines replace
// defaults with the same key.
func section(defaults []string, extra string) string {
	key := func(l string) string { k, _, _ := strings.Cut(l, ":"); return strings.TrimSpace(k) }
	var extras []string
	override := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(extra), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		extras = append(extras, strings.TrimSpace(l))
		override[key(l)] = true
	}
	var b strings.Builder
	for _, l := range defaults {
		if !override[key(l)] {
			b.WriteString("  " + l + "\n")
		}
	}
	for _, l := range extras {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

func openConn(t *testing.T, addr string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// reconnect replaces the test's own connection, after a ClickHouse restart
// left the pooled ones broken.
func (w *faultWorld) reconnect() { w.conn = openConn(w.root, w.chAddr) }

// cliEnv runs fleetsync in-process with extra environment entries.
func (w *faultWorld) cliEnv(ctx context.Context, environ []string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb, environ)
	return code, out.String(), errb.String()
}

// count runs a count() query on the test's connection.
func (w *faultWorld) count(query string) uint64 {
	w.t.Helper()
	var n uint64
	if err := w.conn.QueryRow(context.Background(), strings.ReplaceAll(query, "$db", "`"+w.db+"`")).Scan(&n); err != nil {
		if strings.Contains(err.Error(), "doesn't exist") {
			return 0
		}
		w.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// awaitLeaseLapse waits until the sync lease is free or expired.
func (w *faultWorld) awaitLeaseLapse() {
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

// rows is the number of datapoints rows, duplicates included.
func (w *faultWorld) rows() uint64 { return w.count("SELECT count() FROM $db.datapoints") }

// counter sums fleetsim's counters whose key contains every one of subs.
func (w *faultWorld) counter(subs ...string) int {
	n := 0
next:
	for k, c := range w.sim.Counters() {
		for _, s := range subs {
			if !strings.Contains(k, s) {
				continue next
			}
		}
		n += c
	}
	return n
}

// pointSet is the oracle's view of a set of points.
type pointSet map[pointKey]pointVal

// sourcePoints is every point the simulator holds now for the given
// variables (all when ids is nil), regardless of retention.
func (w *faultWorld) sourcePoints(ids map[string]bool) pointSet {
	out := pointSet{}
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			if ids != nil && !ids[v.ID] {
				continue
			}
			for _, p := range w.sim.Points(v.ID) {
				ctx := p.Context
				if ctx == nil {
					ctx = map[string]any{}
				}
				out[pointKey{v.ID, p.TimestampMs}] = pointVal{p.Value, normalize(ctx)}
			}
		}
	}
	return out
}

// checkLoadedBetween is the oracle where the window's bounds are only known
// to lie in bands: every source point in [mustFrom, mustTo] is loaded exactly
// once with its value and context; every loaded point is a source point (or
// one of extra, points of objects deleted since) in [mayFrom, mayTo].
func (w *faultWorld) checkLoadedBetween(mayFrom, mustFrom, mustTo, mayTo int64, extra pointSet) int {
	w.t.Helper()
	src := w.sourcePoints(nil)
	for k, v := range extra {
		if _, ok := src[k]; !ok {
			src[k] = v
		}
	}
	got := w.loaded()
	var diffs []string
	want := 0
	for k, v := range src {
		if k.ts < mustFrom || k.ts > mustTo {
			continue
		}
		if _, isExtra := extra[k]; isExtra {
			continue
		}
		want++
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing %s@%d", k.variable, k.ts))
		case g.value != v.value || !equalJSON(g.context, v.context):
			diffs = append(diffs, fmt.Sprintf("%s@%d: got %v %v, want %v %v", k.variable, k.ts, g.value, g.context, v.value, v.context))
		}
	}
	for k, g := range got {
		v, ok := src[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("unexpected %s@%d (not in the source)", k.variable, k.ts))
		case k.ts < mayFrom || k.ts > mayTo:
			diffs = append(diffs, fmt.Sprintf("%s@%d loaded from outside [%d, %d]", k.variable, k.ts, mayFrom, mayTo))
		case g.value != v.value || !equalJSON(g.context, v.context):
			diffs = append(diffs, fmt.Sprintf("%s@%d: got %v %v, want %v %v", k.variable, k.ts, g.value, g.context, v.value, v.context))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		w.t.Fatalf("warehouse differs from the source in %d points (%d expected, %d loaded); first: %s", len(diffs), want, len(got), strings.Join(diffs[:min(8, len(diffs))], "; "))
	}
	return want
}

func equalJSON(a, b map[string]any) bool { return reflect.DeepEqual(a, b) }

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

// unknownTable tells ClickHouse's answer for a table or database not
// created yet (a process killed before its migration).
func unknownTable(err error) bool {
	var exc *clickhouse.Exception
	return errors.As(err, &exc) && (exc.Code == 60 || exc.Code == 81)
}

// startBinary starts the fleetsync binary with args and extra environment.
func startBinary(t *testing.T, environ []string, args ...string) *proc {
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
func (p *proc) wait(t *testing.T, d time.Duration) int {
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

// gate passes requests to fleetsim and can hold one chosen request: before
// its response starts, or after part of its body has gone out. A held
// request ends when it is released or its client goes away.
type gate struct {
	next http.Handler
	mu   sync.Mutex
	arm  *hold
	all  []*hold
}

// hold is one armed or caught request.
type hold struct {
	match func(*http.Request) bool
	// afterBytes < 0 holds before the response; otherwise after that many
	// body bytes were sent.
	afterBytes int
	caught     chan struct{}
	release    chan struct{}
	once       sync.Once
}

// holdNext arms the gate for the next request match accepts.
func (g *gate) holdNext(afterBytes int, match func(*http.Request) bool) *hold {
	h := &hold{match: match, afterBytes: afterBytes, caught: make(chan struct{}), release: make(chan struct{})}
	g.mu.Lock()
	g.arm = h
	g.all = append(g.all, h)
	g.mu.Unlock()
	return h
}

func (h *hold) free() { h.once.Do(func() { close(h.release) }) }

// await waits until the hold caught its request.
func (h *hold) await(t *testing.T, within time.Duration, what string) {
	t.Helper()
	select {
	case <-h.caught:
	case <-time.After(within):
		t.Fatalf("no request for %s reached fleetsim within %s", what, within)
	}
}

func (g *gate) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arm = nil
	for _, h := range g.all {
		h.free()
	}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	h := g.arm
	if h != nil && h.match(r) {
		g.arm = nil
	} else {
		h = nil
	}
	g.mu.Unlock()
	if h == nil {
		g.next.ServeHTTP(w, r)
		return
	}
	if h.afterBytes < 0 {
		close(h.caught)
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		g.next.ServeHTTP(w, r)
		return
	}
	g.next.ServeHTTP(&holdingWriter{ResponseWriter: w, h: h, ctx: r.Context()}, r)
}

// holdingWriter stops a response after h.afterBytes body bytes.
type holdingWriter struct {
	http.ResponseWriter
	h    *hold
	ctx  context.Context
	sent int
	held bool
}

func (hw *holdingWriter) Write(b []byte) (int, error) {
	if !hw.held && hw.sent+len(b) >= hw.h.afterBytes {
		n := hw.h.afterBytes - hw.sent
		if _, err := hw.ResponseWriter.Write(b[:n]); err != nil {
			return 0, err
		}
		hw.Flush()
		hw.held = true
		close(hw.h.caught)
		select {
		case <-hw.h.release:
		case <-hw.ctx.Done():
			return n, hw.ctx.Err()
		}
		m, err := hw.ResponseWriter.Write(b[n:])
		return n + m, err
	}
	hw.sent += len(b)
	return hw.ResponseWriter.Write(b)
}

func (hw *holdingWriter) Flush() {
	if f, ok := hw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// isPath matches requests by method and path prefix.
func isPath(method, prefix string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == method && strings.HasPrefix(r.URL.Path, prefix) }
}

// chProxy forwards TCP connections to ClickHouse and can hold the client's
// stream at the statement that contains a marker: before forwarding it, or
// after forwarding it and half of the next packet (the INSERT's data).
type chProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu    sync.Mutex
	arm   *stmtHold
	holds []*stmtHold
	conns []net.Conn
}

// stmtHold is an armed or caught statement hold.
type stmtHold struct {
	marker []byte
	// midData forwards the statement and the start of its data first.
	midData bool
	// skip lets that many matching statements pass before the hold.
	skip   int
	caught chan struct{}
	drop   chan struct{}
	once   sync.Once
}

func startCHProxy(t *testing.T, target string) *chProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &chProxy{t: t, ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *chProxy) addr() string { return p.ln.Addr().String() }

func (p *chProxy) close() {
	p.ln.Close()
	p.dropHeld()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// dropHeld disarms the proxy and closes every held connection.
func (p *chProxy) dropHeld() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arm = nil
	for _, h := range p.holds {
		h.free()
	}
}

// holdStatement arms the proxy for the statement containing marker that
// comes after skip others containing it.
func (p *chProxy) holdStatement(marker string, midData bool, skip int) *stmtHold {
	h := &stmtHold{marker: []byte(marker), midData: midData, skip: skip, caught: make(chan struct{}), drop: make(chan struct{})}
	p.mu.Lock()
	p.arm = h
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// free ends the hold by closing the held connection (nothing more of the
// statement is forwarded).
func (h *stmtHold) free() { h.once.Do(func() { close(h.drop) }) }

func (h *stmtHold) await(t *testing.T, within time.Duration, what string) {
	t.Helper()
	select {
	case <-h.caught:
	case <-time.After(within):
		t.Fatalf("no statement for %s reached the ClickHouse proxy within %s", what, within)
	}
}

func (p *chProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(c, s); c.Close() }()
		go p.forward(c, s)
	}
}

// midDataBytes is how much of an INSERT's stream (statement and data) a
// mid-data hold lets through: the statement and the start of its block.
const midDataBytes = 4096

// forward copies client bytes to the server, looking for the armed marker.
func (p *chProxy) forward(c, s net.Conn) {
	defer s.Close()
	defer c.Close()
	buf := make([]byte, 64<<10)
	var tail []byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			window := append(append([]byte(nil), tail...), chunk...)
			p.mu.Lock()
			h := p.arm
			switch {
			case h == nil || !bytes.Contains(window, h.marker):
				h = nil
			case h.skip > 0:
				h.skip--
				h = nil
				// The marker must not match again from the kept tail.
				window = window[len(window):]
			default:
				p.arm = nil
			}
			p.mu.Unlock()
			if h != nil {
				if h.midData && !forwardPrefix(c, s, chunk, buf) {
					return
				}
				close(h.caught)
				<-h.drop
				return
			}
			if _, err := s.Write(chunk); err != nil {
				return
			}
			tail = window[len(window)-min(len(window), 256):]
		}
		if err != nil {
			return
		}
	}
}

// forwardPrefix sends the first midDataBytes of the stream that starts with
// first, reading more from c as needed; it reports whether that worked.
func forwardPrefix(c, s net.Conn, first, buf []byte) bool {
	left := midDataBytes
	chunk := append([]byte(nil), first...)
	for {
		n := min(len(chunk), left)
		if _, err := s.Write(chunk[:n]); err != nil {
			return false
		}
		left -= n
		if left == 0 {
			return true
		}
		m, err := c.Read(buf)
		if err != nil {
			return false
		}
		chunk = buf[:m]
	}
}
