package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	fsch "github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/rolluptest"
)

// checkRollups asserts that datapoints_latest and datapoints_hourly equal,
// row for row, the aggregates computed from scratch over datapoints FINAL.
func (w *world) checkRollups() {
	w.t.Helper()
	c, err := fsch.Open(context.Background(), fsch.Config{Addr: []string{w.chAddr}, Database: w.db}, nil, prometheus.NewRegistry())
	if err != nil {
		w.t.Fatal(err)
	}
	defer c.Close()
	h, l := rolluptest.Check(w.t, c)
	w.t.Logf("rollups exact: %d hourly and %d latest rows", h, l)
}

// TestRollupFillsTheTablesOfAWarehouseSyncedBeforeThem: a warehouse
// synced before the rollups existed (emptied here, as if the tables had
// just been created by migrate) gets them filled by `fleetsync rollup`,
// exactly; a range that ends before the newest points still gives each
// variable its true latest row.
func TestRollupFillsTheTablesOfAWarehouseSyncedBeforeThem(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.sync()
	ctx := context.Background()
	for _, table := range []string{fsch.TableHourly, fsch.TableLatest} {
		if err := w.conn.Exec(ctx, "DROP TABLE `"+w.db+"`.`"+table+"`"); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := w.cli(ctx, "migrate", "--config", w.cfgPath); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	var n uint64
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM `"+w.db+"`.`"+fsch.TableHourly+"`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("datapoints_hourly after migrate: %d rows, err %v; want an empty table", n, err)
	}
	from := time.Now().Add(-40 * 24 * time.Hour).UTC().Format(time.RFC3339)
	to := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	code, out, errOut := w.cli(ctx, "rollup", "--config", w.cfgPath, "--from", from, "--to", to)
	if code != 0 || !strings.Contains(out, "rebuilt the rollups of") {
		t.Fatalf("rollup: exit %d\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 5))
	}
	w.checkRollups()
}

// With sync.rollups off a sync leaves the analyst tables alone (the fast
// first backfill the key is for), and `fleetsync rollup` then makes them
// exact.
func TestSyncWithRollupsOffLeavesThemToTheRollupCommand(t *testing.T) {
	w := newWorld(t, worldOpts{sync: "rollups: false"})
	w.sync()
	ctx := context.Background()
	for _, table := range []string{fsch.TableHourly, fsch.TableLatest} {
		var n uint64
		if err := w.conn.QueryRow(ctx, "SELECT count() FROM `"+w.db+"`.`"+table+"`").Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s after a sync with rollups: false: %d rows, err %v; want none", table, n, err)
		}
	}
	from := time.Now().Add(-40 * 24 * time.Hour).UTC().Format(time.RFC3339)
	to := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	if code, out, errOut := w.cli(ctx, "rollup", "--config", w.cfgPath, "--from", from, "--to", to); code != 0 {
		t.Fatalf("rollup: exit %d\nstdout: %s\nstderr: %s", code, out, lastLines(errOut, 5))
	}
	w.checkRollups()
}

func TestRollupRejectsABadRangeOnOneLine(t *testing.T) {
	w := newWorld(t, worldOpts{})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "2026-01-02T00:00:00Z"}, "--to is required"},
		{[]string{"--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"}, "--from is after --to"},
		{[]string{"--from", "yesterday", "--to", "2026-01-01T00:00:00Z"}, "not RFC 3339"},
	} {
		code, _, errOut := w.cli(context.Background(), append([]string{"rollup", "--config", w.cfgPath}, tc.args...)...)
		if code != exitBadUsage || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("rollup %v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestSyncWhoseRollupFailsKeepsItsMarksAndTheNextSyncRecomputes stands for
// a crash between the load and the rollup: ClickHouse acknowledges the
// points but refuses the rollup (its table cannot hold the aggregates).
// No mark may move, so the next sync reads the same windows again and
// recomputes their hours.
func TestSyncWhoseRollupFailsKeepsItsMarksAndTheNextSyncRecomputes(t *testing.T) {
	w := newWorld(t, worldOpts{})
	ctx := context.Background()
	if code, out, errOut := w.cli(ctx, "migrate", "--config", w.cfgPath); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	hourly := "`" + w.db + "`.`" + fsch.TableHourly + "`"
	for _, q := range []string{"DROP TABLE " + hourly,
		"CREATE TABLE " + hourly + " (variable_id String, device_id String, hour DateTime('UTC'), count Array(String), sum Float64, min Float64, max Float64, " +
			"first_value Float64, last_value Float64, first_ts_ms Int64, last_ts_ms Int64, version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (variable_id, hour)"} {
		if err := w.conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errOut := w.cli(ctx, "sync", "--config", w.cfgPath)
	if code == 0 {
		t.Fatalf("sync exited 0 although its rollups could not be written")
	}
	if !strings.Contains(errOut, "recompute the rollups") {
		t.Errorf("the failed sync does not say the rollup failed:\n%s", lastLines(errOut, 5))
	}
	if m := w.marks(); len(m) != 0 {
		t.Fatalf("%d marks committed although their rollups failed: %v", len(m), m)
	}
	if n := len(w.loaded()); n == 0 {
		t.Fatalf("no points loaded by the failed sync; the test needs them loaded and not rolled up")
	}
	if err := w.conn.Exec(ctx, "DROP TABLE "+hourly); err != nil {
		t.Fatal(err)
	}
	w.sync()
	w.checkOracle()
	w.checkRollups()
}
