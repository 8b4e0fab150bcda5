package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// watermarkQueries are the README's SQL examples that read sync_watermark.
func watermarkQueries(t *testing.T, db string) []string {
	t.Helper()
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, block := range strings.Split(string(text), "```sql")[1:] {
		q, _, _ := strings.Cut(block, "```")
		if !strings.Contains(q, "sync_watermark") {
			continue
		}
		out = append(out, strings.TrimSuffix(strings.TrimSpace(strings.ReplaceAll(q, "fleet.", "`"+db+"`.")), ";"))
	}
	return out
}

// TestTheSettledWatermarkIsPublishedAndTheReadmesQueryUsesIt: after a sync
// whose every variable was re-read from its mark's lookback, sync_watermark
// holds the least mark less the lookback (each variable's first read owes
// from the floor, so the first sync's is the floor); the README's hourly
// query flags exactly the rows that end at or before it; a backfill that
// reaches before it says so, one after it does not.
func TestTheSettledWatermarkIsPublishedAndTheReadmesQueryUsesIt(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.setSync("idle_recheck: 1s")
	w.sync()
	watermark := func() int64 {
		t.Helper()
		got := w.rows("SELECT scope, settled_before_ms FROM " + w.table("sync_watermark") + " FINAL")
		row, ok := got[""]
		if !ok || len(got) != 1 {
			t.Fatalf("sync_watermark holds %v, want one row of scope ''", got)
		}
		ms, err := strconv.ParseInt(strings.TrimPrefix(row, "|"), 10, 64)
		if err != nil {
			t.Fatalf("settled_before_ms %q: %v", row, err)
		}
		return ms
	}
	marks := func() (least int64) {
		t.Helper()
		least = -1
		for _, row := range w.rows("SELECT variable_id, max(hwm_ms) FROM " + w.table("sync_state") + " GROUP BY variable_id") {
			_, hwm, _ := strings.Cut(row, "|")
			ms, _ := strconv.ParseInt(hwm, 10, 64)
			if ms > 0 && (least < 0 || ms < least) {
				least = ms
			}
		}
		if least < 0 {
			t.Fatal("no variable holds a mark after a sync")
		}
		return least
	}
	first := watermark()
	if least := marks(); first >= least-time.Hour.Milliseconds() {
		t.Fatalf("after the first sync the watermark is %d, not below the least mark less the lookback %d: a point written during that sync may still land", first, least-time.Hour.Milliseconds())
	}
	time.Sleep(1100 * time.Millisecond) // every variable's recheck period passes
	w.sync()
	second := watermark()
	if want := marks() - time.Hour.Milliseconds(); second != want {
		t.Fatalf("after a sync that re-read every variable the watermark is %d, want the least mark less the lookback, %d", second, want)
	}
	if second < first {
		t.Fatalf("the watermark moved back from %d to %d", first, second)
	}
	qs := watermarkQueries(t, w.db)
	if len(qs) != 2 {
		t.Fatalf("the README has %d queries of sync_watermark, want 2", len(qs))
	}
	settled, open := 0, 0
	rs, err := w.conn.Query(context.Background(), qs[0])
	if err != nil {
		t.Fatalf("%s: %v", qs[0], err)
	}
	for rs.Next() {
		var id string
		var hour time.Time
		var avg float64
		var n uint64
		var flag uint8
		if err := rs.Scan(&id, &hour, &avg, &n, &flag); err != nil {
			t.Fatal(err)
		}
		if want := hour.UnixMilli()+3_600_000 <= second; (flag == 1) != want {
			t.Fatalf("the hour %s of %s is flagged settled=%d with the watermark at %s", hour.UTC(), id, flag, time.UnixMilli(second).UTC())
		}
		if flag == 1 {
			settled++
		} else {
			open++
		}
	}
	rs.Close()
	if settled == 0 || open == 0 {
		t.Fatalf("the README's hourly query flags %d rows settled and %d open over two days; want both", settled, open)
	}
	var complete uint8
	if err := w.conn.QueryRow(context.Background(), qs[1]).Scan(&complete); err != nil {
		t.Fatalf("%s: %v", qs[1], err)
	}
	if today := time.Now().UTC().Truncate(24 * time.Hour).UnixMilli(); (complete == 1) != (second >= today) {
		t.Fatalf("'is yesterday complete?' answers %d with the watermark at %s", complete, time.UnixMilli(second).UTC())
	}
	for _, c := range []struct {
		from time.Time
		note bool
	}{{time.UnixMilli(second).Add(-2 * time.Hour), true}, {time.UnixMilli(second).Add(time.Minute), false}} {
		code, out, errs := w.cli(context.Background(), "backfill", "--config", w.cfgPath, "--from", c.from.UTC().Format(time.RFC3339), "--to", time.Now().UTC().Format(time.RFC3339))
		if code != 0 {
			t.Fatalf("backfill exited %d: %s %s", code, out, lastLines(errs, 10))
		}
		if got := strings.Contains(out, "before the settled watermark"); got != c.note {
			t.Errorf("a backfill from %s (watermark %s) notes it: %v, want %v\n%s", c.from.UTC(), time.UnixMilli(second).UTC(), got, c.note, out)
		}
	}
}
