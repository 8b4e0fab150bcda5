package clickhouse

import (
	"fmt"
	"testing"

	"github.com/fleetsync/fleetsync/load/analyst"
)

func hourly(t analyst.Range) window {
	return window{hourStart(t.FromMs), hourStart(t.ToMs) + hourMs}
}

func latest(t analyst.Range) window { return window{from: hourStart(t.ToMs)} }

func TestBatchesShareStatementsOnlyWithinSlack(t *testing.T) {
	const now = int64(1_800_000_000_000)
	const month = 30 * 24 * hourMs
	var backfill []analyst.Range
	for i := range 1000 {
		// Ranges that start and end up to three hours apart.
		off := int64(i%180) * 60 * 1000
		backfill = append(backfill, analyst.Range{VariableID: fmt.Sprint("v", i), FromMs: now - month + off, ToMs: now - off})
	}
	incremental := []analyst.Range{
		{VariableID: "a", FromMs: now - hourMs, ToMs: now},
		{VariableID: "b", FromMs: now - hourMs + 5, ToMs: now - 3},
		{VariableID: "late", FromMs: now - 7*24*hourMs, ToMs: now},
		{VariableID: "c", FromMs: now - 2*hourMs, ToMs: now - hourMs},
	}
	for _, tc := range []struct {
		name    string
		touched []analyst.Range
		limit   int
		of      func(analyst.Range) window
		want    []int // variables per batch
	}{
		{"a backfill's ranges share statements of rollupBatch", backfill, rollupBatch, hourly, []int{500, 500}},
		{"no statement is longer than the limit", backfill, 300, hourly, []int{300, 300, 300, 100}},
		{"a limit above rollupBatch is rollupBatch", backfill, 5000, hourly, []int{500, 500}},
		{"a late point a week back reads the week alone", incremental, rollupBatch, hourly, []int{1, 3}},
		{"hourlyStreams statements for a cycle's variables", incremental, 2, hourly, []int{1, 2, 1}},
		{"latest rows of a cycle read from the same hours", incremental, rollupBatch, latest, []int{4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := batches(tc.touched, tc.limit, tc.of)
			var sizes []int
			seen := map[string]bool{}
			for _, b := range got {
				sizes = append(sizes, len(b.ids))
				for _, id := range b.ids {
					seen[id] = true
					for _, tt := range tc.touched {
						if tt.VariableID == id {
							w := tc.of(tt)
							if w.from < b.from || (b.to != 0 && w.to > b.to) {
								t.Errorf("batch %+v does not cover %s's window %+v", b.window, id, w)
							}
						}
					}
				}
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.want) {
				t.Errorf("batch sizes %v, want %v", sizes, tc.want)
			}
			if len(seen) != len(tc.touched) {
				t.Errorf("%d of %d variables in a batch", len(seen), len(tc.touched))
			}
		})
	}
}
