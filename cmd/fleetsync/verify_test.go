package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

func TestVerifyCatchesADeletedWarehouseRowAndRepairFixesIt(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 3, Variables: 3, Points: 200, Span: 5 * 24 * time.Hour}})
	w.sync()
	ctx := context.Background()
	toMs := time.Now().UnixMilli()
	verify := func(extra ...string) (int, string, string) { t.Helper(); return w.verifyAll(toMs, extra...) }
	code, out, errs := verify()
	if code != 0 || !strings.Contains(out, "0 mismatch") {
		t.Fatalf("verify right after a sync exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}

	d := w.sim.Devices()[0]
	v := d.Variables[0]
	pts := w.sim.Points(v.ID)
	victim := pts[len(pts)/2]
	if err := w.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE `%s`.datapoints DELETE WHERE variable_id = '%s' AND ts_ms = %d", w.db, v.ID, victim.TimestampMs)); err != nil {
		t.Fatalf("delete a warehouse row: %v", err)
	}
	w.waitMutations()
	if n := len(w.loaded()); n != w.checkOracleCount()-1 {
		t.Fatalf("after the deletion the warehouse holds %d points, want one fewer than the source's %d", n, w.checkOracleCount())
	}

	code, out, errs = verify()
	if code != 1 {
		t.Fatalf("verify with a deleted row exited %d, want 1:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	n := w.sim.PointCountBetween(v.ID, w.sim.RetentionFloor().Add(w.margin).UnixMilli(), toMs)
	wantRow := regexp.MustCompile(regexp.QuoteMeta(d.Label) + `\s+` + regexp.QuoteMeta(v.Label) + fmt.Sprintf(`\s+%d\s+%d\s`, n, n-1))
	if !wantRow.MatchString(out) || !strings.Contains(out, "1 mismatch") {
		t.Fatalf("verify output does not show %s/%s with source %d and warehouse %d:\n%s", d.Label, v.Label, n, n-1, out)
	}
	if last := lastLines(errs, 1); !strings.HasPrefix(last, "fleetsync verify: 1 of 9 variables disagree") || !strings.Contains(last, "--repair") {
		t.Fatalf("last stderr line %q; want the disagreement summarised with the next step", last)
	}

	code, out, _ = verify("--json")
	var rep struct {
		Variables  int `json:"variables"`
		Matched    int `json:"matched"`
		Mismatches []struct {
			VariableID     string `json:"variable_id"`
			DeviceLabel    string `json:"device_label"`
			SourceCount    int64  `json:"source_count"`
			WarehouseCount uint64 `json:"warehouse_count"`
		} `json:"mismatches"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("verify --json exited %d with unreadable JSON (%v):\n%s", code, err, out)
	}
	if rep.Variables != 9 || rep.Matched != 8 || len(rep.Mismatches) != 1 || rep.Mismatches[0].VariableID != v.ID ||
		rep.Mismatches[0].SourceCount != int64(n) || rep.Mismatches[0].WarehouseCount != uint64(n-1) {
		t.Fatalf("verify --json reports %+v; want 9 variables, 8 matched, %s at %d vs %d", rep, v.ID, n, n-1)
	}

	w.sim.ResetCounters()
	code, out, errs = verify("--repair")
	if code != 0 || !strings.Contains(out, "repair: re-extracted 1 variables") || !strings.Contains(out, "0 still mismatch") {
		t.Fatalf("verify --repair exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	if series := w.sim.Counters()["POST /api/v1.6/data/raw/series 200"]; series != 1 {
		t.Fatalf("the repair made %d raw-series requests, want 1 for the one variable", series)
	}
	if code, out, errs = verify(); code != 0 {
		t.Fatalf("verify after the repair exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	w.checkOracle()
	w.checkRollups()
}

// verifyAll runs `fleetsync verify` with extra flags over everything the
// source holds up to toMs.
func (w *world) verifyAll(toMs int64, extra ...string) (int, string, string) {
	args := []string{"verify", "--config", w.cfgPath, "--from", "2000-01-01T00:00:00Z", "--to", fmt.Sprint(toMs)}
	return w.cli(context.Background(), append(args, extra...)...)
}

// checkOracleCount is the number of points the warehouse should hold.
func (w *world) checkOracleCount() int { return len(w.expected()) }

// waitMutations waits until ClickHouse has applied every mutation of the
// world's database (ALTER ... DELETE runs in the background).
func (w *world) waitMutations() {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pending uint64
		if err := w.conn.QueryRow(context.Background(), "SELECT count() FROM system.mutations WHERE database = ? AND is_done = 0", w.db).Scan(&pending); err != nil {
			w.t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d mutations still pending after 30s", pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestVerifyRejectsARangeOutsideRetentionAsUsage(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 1, Variables: 1, Points: 10, Span: time.Hour}})
	code, _, errs := w.cli(context.Background(), "verify", "--config", w.cfgPath, "--from", "2000-01-01T00:00:00Z", "--to", "2000-02-01T00:00:00Z")
	if code != 2 || !strings.Contains(lastLines(errs, 1), "retention window") {
		t.Fatalf("verify of a range before retention exited %d: %s", code, lastLines(errs, 1))
	}
}

// verify compares the analyst tables with datapoints FINAL over its range
// and reports each row that differs, in text and JSON; --repair rewrites
// them, and a second verify finds nothing. The corruptions: a wrong count,
// a missing hour, an extra hour, a wrong and a missing latest row.
func TestVerifyChecksTheAnalystTablesAndRepairRewritesWhatDiffers(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 2, Variables: 2, Points: 300, Span: 2 * 24 * time.Hour}})
	w.sync()
	ctx := context.Background()
	toMs := time.Now().UnixMilli()
	verify := func(extra ...string) (int, string, string) { t.Helper(); return w.verifyAll(toMs, extra...) }
	code, out, errs := verify()
	if code != 0 || !strings.Contains(out, ", 0 rows differ from datapoints FINAL") {
		t.Fatalf("verify right after a sync exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}

	// The variables with points (fleetsim leaves some empty).
	ids := chtest.Strings(t, w.conn, "SELECT DISTINCT variable_id FROM `"+w.db+"`.datapoints ORDER BY variable_id")
	if len(ids) < 3 {
		t.Fatalf("only %d variables have points; the test needs 3", len(ids))
	}
	hourly, latest := "`"+w.db+"`.datapoints_hourly", "`"+w.db+"`.datapoints_latest"
	exec := func(q string) {
		t.Helper()
		if err := w.conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A wrong count: the first hour of ids[0] counts one point more.
	exec(fmt.Sprintf("INSERT INTO %s SELECT variable_id, device_id, hour, count + 1, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms, version + 1 "+
		"FROM %s FINAL WHERE variable_id = '%s' ORDER BY hour LIMIT 1", hourly, hourly, ids[0]))
	// A missing hour: the last hour of ids[1] is gone.
	exec(fmt.Sprintf("ALTER TABLE %s DELETE WHERE variable_id = '%s' AND hour = (SELECT max(hour) FROM %s WHERE variable_id = '%s')", hourly, ids[1], hourly, ids[1]))
	// An extra hour: ids[0] has no point ten days back.
	exec(fmt.Sprintf("INSERT INTO %s (variable_id, device_id, hour, count, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms, version) "+
		"SELECT '%s', 'd', toStartOfHour(now() - INTERVAL 10 DAY), toUInt64(3), 3., 1., 1., 1., 1., toInt64(0), toInt64(0), toUInt64(1)", hourly, ids[0]))
	// A wrong latest row, and a missing one.
	exec(fmt.Sprintf("INSERT INTO %s SELECT variable_id, device_id, device_label, variable_label, ts_ms, ts, value + 1, context, lat, lng, version + 1 "+
		"FROM %s FINAL WHERE variable_id = '%s'", latest, latest, ids[2]))
	exec(fmt.Sprintf("ALTER TABLE %s DELETE WHERE variable_id = '%s'", latest, ids[1]))
	w.waitMutations()

	code, out, errs = verify()
	if code != 1 || !strings.Contains(out, ", 5 rows differ from datapoints FINAL") {
		t.Fatalf("verify of corrupted analyst tables exited %d, want 1 and 5 rows:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	for _, want := range []string{
		"datapoints_hourly  " + ids[0], "count ", "datapoints_hourly  " + ids[1], "missing", "extra: no point in that hour",
		"datapoints_latest  " + ids[2], "got {ts_ms=", "datapoints_latest  " + ids[1],
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verify's report lacks %q:\n%s", want, out)
		}
	}
	if last := lastLines(errs, 1); !strings.Contains(last, "5 rows of the analyst tables differ") || !strings.Contains(last, "--repair") {
		t.Errorf("last stderr line %q; want the difference summarised with the next step", last)
	}
	code, out, _ = verify("--json")
	var rep struct {
		Rollups struct {
			Hours, Latest int
			Diffs         []struct {
				Table      string `json:"table"`
				VariableID string `json:"variable_id"`
				HourMs     int64  `json:"hour_ms"`
				Problem    string `json:"problem"`
			} `json:"diffs"`
		} `json:"rollups"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("verify --json exited %d with unreadable JSON (%v):\n%s", code, err, out)
	}
	tables := map[string]int{}
	for _, d := range rep.Rollups.Diffs {
		tables[d.Table]++
		if d.Table == "datapoints_hourly" && d.HourMs == 0 {
			t.Errorf("hourly diff without its hour: %+v", d)
		}
	}
	if len(rep.Rollups.Diffs) != 5 || tables["datapoints_hourly"] != 3 || tables["datapoints_latest"] != 2 || rep.Rollups.Latest != len(ids) || rep.Rollups.Hours == 0 {
		t.Fatalf("verify --json reports %+v; want 3 hourly and 2 latest diffs over %d latest rows", rep.Rollups, len(ids))
	}

	code, out, errs = verify("--repair")
	if code != 0 || !strings.Contains(out, "analyst tables repair: rewrote 5 rows; 0 still differ") {
		t.Fatalf("verify --repair exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	code, out, errs = verify()
	if code != 0 || !strings.Contains(out, ", 0 rows differ from datapoints FINAL") {
		t.Fatalf("verify after the repair exited %d:\n%s\n%s", code, out, lastLines(errs, 5))
	}
	w.checkRollups()
}
