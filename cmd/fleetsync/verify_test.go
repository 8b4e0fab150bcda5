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
)

func TestVerifyCatchesADeletedWarehouseRowAndRepairFixesIt(t *testing.T) {
	w := newWorld(t, worldOpts{sim: fleetsim.Options{Devices: 3, Variables: 3, Points: 200, Span: 5 * 24 * time.Hour}})
	w.sync()
	ctx := context.Background()
	toMs := time.Now().UnixMilli()
	from, to := "2000-01-01T00:00:00Z", fmt.Sprint(toMs)
	verify := func(extra ...string) (int, string, string) {
		t.Helper()
		return w.cli(ctx, append([]string{"verify", "--config", w.cfgPath, "--from", from, "--to", to}, extra...)...)
	}
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
