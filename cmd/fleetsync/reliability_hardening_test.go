package main

// Hardening of the inputs (issue 7): names that could inject SQL are refused
// before anything is sent to ClickHouse, and a dense backfill stays within a
// low memory limit. docs/reliability.md lists what each test proves.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

func TestIdentifierInjectionInDatabaseOrPrefixIsRefusedWithStatus2(t *testing.T) {
	w := newFaultWorld(t, worldOpts{sim: fleetsim.Options{Devices: 1, Variables: 1, Points: 10, Span: time.Hour}})
	good, err := os.ReadFile(w.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	evil := "x`; DROP DATABASE " + w.db + "; --"
	withKey := func(key, value string) string {
		return strings.Replace(string(good), "clickhouse:\n", fmt.Sprintf("clickhouse:\n  %s: %q\n", key, value), 1)
	}
	noDatabase := strings.Replace(string(good), "  database: "+w.db+"\n", "", 1)
	cases := []struct {
		name    string
		cfg     string
		environ []string
		field   string
	}{
		{"database in the file", withKey("database", evil), nil, "clickhouse.database"},
		{"table prefix in the file", withKey("table_prefix", "fs`; DROP TABLE x; --"), nil, "clickhouse.table_prefix"},
		{"database from the environment", noDatabase, []string{"FLEETSYNC_CLICKHOUSE_DATABASE=" + evil}, "clickhouse.database"},
		{"a quote in the database", withKey("database", `fleet"x`), nil, "clickhouse.database"},
		{"a dot in the table prefix", withKey("table_prefix", "other.fs_"), nil, "clickhouse.table_prefix"},
	}
	for _, c := range cases {
		if c.cfg == noDatabase && strings.Contains(noDatabase, "database: "+w.db) {
			t.Fatal("the test could not take the database out of the configuration")
		}
		for _, cmd := range []string{"sync", "migrate", "status", "run"} {
			t.Run(c.name+"/"+cmd, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "evil.yaml")
				if err := os.WriteFile(path, []byte(c.cfg), 0o600); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				code, _, errs := w.cliEnv(ctx, c.environ, cmd, "--config", path)
				last := lastLines(errs, 1)
				if code != 2 || !strings.Contains(last, c.field) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
					t.Fatalf("exit %d (want 2) and %q (want one line naming %s)", code, errs, c.field)
				}
			})
		}
	}
	// Nothing reached ClickHouse: the test database is still there, empty.
	if n := w.count("SELECT count() FROM system.tables WHERE database = '" + w.db + "'"); n != 0 {
		t.Fatalf("%d tables were created in %s by configurations that were refused", n, w.db)
	}
	if n := w.count("SELECT count() FROM system.databases WHERE name = '" + w.db + "'"); n != 1 {
		t.Fatalf("the database %s is gone", w.db)
	}
}

// vmHWM reads the VmHWM line (kB) of a /proc/PID/status file.
func vmHWM(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb, err == nil
		}
	}
	return 0, false
}

// gcLiveRe reads the live heap after a collection from a gctrace line
// ("gc 7 @0.5s 3%: ..., 40->42->21 MB, 42 MB goal, ...").
var gcLiveRe = regexp.MustCompile(`\d+->\d+->(\d+) MB`)

func TestFaultDenseBackfillCompletesUnderALowMemoryLimit(t *testing.T) {
	devices, vars, points := 20, 10, 5000 // 200 variables × 5k points = 1M points
	if heavyFaults() {
		devices = 200 // 10M points
	}
	// Fewer fetchers, one insert worker and small batches: the working set
	// (fetch chunks of up to 32k rows, the batch being inserted, the
	// driver's column buffers) fits the limit.
	w := newFaultWorld(t, worldOpts{
		sim:  fleetsim.Options{Devices: devices, Variables: vars, Points: points, Span: 30 * 24 * time.Hour},
		sync: "batch_rows: 10000\nmax_in_flight: 2\ninsert_workers: 1",
	})
	p := startBinary(t, []string{"GOMEMLIMIT=64MiB", "GODEBUG=gctrace=1"}, "sync", "--config", w.cfgPath)
	// The peak RSS as the kernel keeps it for the process's own memory
	// (VmHWM). The rusage of the exited child would not do: it starts from
	// this test process's RSS, which the child shared until its exec.
	hwm := make(chan int64, 1)
	go func() {
		var peak int64
		path := fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)
		for {
			if kb, ok := vmHWM(path); ok {
				peak = max(peak, kb)
			}
			select {
			case <-p.done:
				hwm <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	code := p.wait(t, 10*time.Minute)
	if code != 0 {
		t.Fatalf("the dense backfill exited %d under GOMEMLIMIT=64MiB:\n%s", code, lastLines(p.stderr.String(), 10))
	}
	peak := <-hwm / 1024
	n := int(w.count("SELECT count() FROM $db.datapoints FINAL"))
	want := 0
	for _, d := range w.sim.Devices() {
		for _, v := range d.Variables {
			want += w.sim.PointCountBetween(v.ID, w.sim.RetentionFloor().UnixMilli(), time.Now().UnixMilli())
		}
	}
	live := 0
	for _, m := range gcLiveRe.FindAllStringSubmatch(p.stderr.String(), -1) {
		mb, _ := strconv.Atoi(m[1])
		live = max(live, mb)
	}
	t.Logf("%d points loaded (%d in the source) with a peak RSS of %d MiB and a peak live heap of %d MB under GOMEMLIMIT=64MiB", n, want, peak, live)
	if n != want {
		t.Fatalf("the backfill loaded %d distinct points, the source holds %d", n, want)
	}
	// GOMEMLIMIT is soft: the heap stays near it, the process (runtime,
	// stacks, buffers of the driver) somewhat above. The million points
	// alone would take more than the bound if they were held.
	if peak > 128 || live > 96 {
		t.Fatalf("peak RSS %d MiB, live heap %d MB under GOMEMLIMIT=64MiB: memory is not bounded by the batch sizes", peak, live)
	}
}
