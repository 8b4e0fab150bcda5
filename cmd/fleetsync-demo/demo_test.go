package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/fleetsync/fleetsync/config"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.StopShared()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// The product binary the demo runs, built once per test process from
// ../fleetsync, as make build builds it.
var (
	binDir  string
	binOnce sync.Once
	binPath string
	binErr  error
)

func fleetsyncBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "fleetsync-demo-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "fleetsync")
		if out, err := exec.Command("go", "build", "-o", binPath, "../fleetsync").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ../fleetsync: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// lastLines returns the last n lines of s, for failure messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// syncedPoints reads the point count and the address from the demo's
// summary line.
func syncedPoints(t *testing.T, text string) (int, string) {
	t.Helper()
	i := strings.Index(text, "Synced ")
	if i < 0 {
		t.Fatalf("demo output lacks the summary:\n%s", text)
	}
	var n int
	var addr string
	if _, err := fmt.Sscanf(text[i:], "Synced %d points into ClickHouse %s", &n, &addr); err != nil {
		t.Fatalf("demo summary unreadable: %v\n%s", err, text[i:])
	}
	return n, strings.TrimSuffix(addr, ",")
}

func TestDemoSyncsAndPrintsExampleQueries(t *testing.T) {
	srv := chtest.Shared(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--fleetsync", fleetsyncBinary(t), "--clickhouse", srv.Addr(), "--dir", t.TempDir(),
		"--devices", "2", "--variables", "4", "--points", "500"}, &out, &errb)
	if code != 0 {
		t.Fatalf("demo exited %d: %s", code, lastLines(errb.String(), 5))
	}
	text := out.String()
	for _, want := range []string{"-- Latest value of every variable, per device", "-- Hourly average temperature", "device_label", "latest_value", "avg_value"} {
		if !strings.Contains(text, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, text)
		}
	}
	if n, addr := syncedPoints(t, text); n < 2*4*400 || addr != srv.Addr() {
		t.Fatalf("demo reports %d points into %s, want about 2x4x500 into %s", n, addr, srv.Addr())
	}
}

// TestDemoStartsItsOwnClickHouseWhenNoneAnswersAndStopsIt is `make demo` on a
// machine with no ClickHouse: nothing answers at --clickhouse, so the demo
// starts a server in its directory, syncs into it, prints the queries, and
// stops that server before it returns.
func TestDemoStartsItsOwnClickHouseWhenNoneAnswersAndStopsIt(t *testing.T) {
	dir := t.TempDir()
	// Port 1 (tcpmux): nothing answers there. A port freed by closing a
	// listener on :0 could be bound again by another process under load.
	nobody := "127.0.0.1:1"
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--fleetsync", fleetsyncBinary(t), "--clickhouse", nobody, "--dir", dir,
		"--devices", "2", "--variables", "2", "--points", "200"}, &out, &errb)
	if code != 0 {
		t.Fatalf("demo exited %d: %s", code, lastLines(errb.String(), 5))
	}
	if !strings.Contains(errb.String(), "starting a local clickhouse-server in "+dir) {
		t.Fatalf("the demo did not say it starts a ClickHouse:\n%s", lastLines(errb.String(), 5))
	}
	n, addr := syncedPoints(t, out.String())
	if n < 2*2*150 || addr == nobody {
		t.Fatalf("demo reports %d points into %q, want about 2x2x200 into a server it started:\n%s", n, addr, out.String())
	}
	if chserver.Reachable(context.Background(), addr) {
		t.Fatalf("the ClickHouse the demo started at %s still answers after the demo returned", addr)
	}
	// No process of that server is left: none runs with the demo's directory.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(dir)) {
			t.Fatalf("a process still runs from the demo's directory: %s: %q", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}

// The demo runs fleetsync on its defaults: the configuration it writes,
// read as fleetsync reads it, differs from config.Default() only where it
// points at the demo's fleetsim and ClickHouse and quiets the log.
func TestDemoConfigIsTheDefaultPointedAtTheDemo(t *testing.T) {
	got, err := config.Parse([]byte(demoConfig("http://127.0.0.1:1234", "127.0.0.1:9999")), "demo", nil)
	if err != nil {
		t.Fatalf("fleetsync rejects the demo's configuration: %v", err)
	}
	want := config.Default()
	want.Source.BaseURL = "http://127.0.0.1:1234"
	want.Source.TokenFile = ""
	want.Source.Token = config.Secret(demoToken)
	want.Source.InitialRequestsPerSecond = 0
	want.ClickHouse.Addr = []string{"127.0.0.1:9999"}
	want.ClickHouse.Database = demoDatabase
	want.Log.Level = "warn"
	want.Log.Format = "console"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the demo's configuration differs from the defaults beyond its own keys:\n got %+v\nwant %+v", *got, *want)
	}
}

// Without a fleetsync binary the demo says how to build one, before it
// starts anything.
func TestDemoWithoutTheProductBinarySaysHowToBuildIt(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--fleetsync", filepath.Join(dir, "nope"), "--dir", filepath.Join(dir, "demo")}, &out, &errb)
	msg := errb.String()
	if code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "make build") {
		t.Fatalf("demo without fleetsync: exit %d, stderr %q; want 2 and one line naming make build", code, msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "demo")); !os.IsNotExist(err) {
		t.Errorf("the demo created its directory before it found fleetsync (stat: %v)", err)
	}
}
