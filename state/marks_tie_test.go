package state

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// At equal marks and equal reads (HwmMs and CheckedMs) both stores keep
// the mark MergeMark keeps. The ClickHouse store's readers rank a
// variable's rows by (version, checked_ms, updated_at, last_activity_ms,
// future_ms, reread_ms), and MergeMark ranks marks in that order too
// (updated_at to the second). Before, MergeMark kept the given mark at
// such a tie while the readers picked the row of the later updated_at or
// the greater reread_ms (found by the adversarial review of d09407b): two
// backfills of one variable under two configurations (1h and 2h), planned
// with one mark, copy its checked_ms, last_activity_ms and future_ms and
// load the same greatest point, so their marks tie on all of it but the
// debt. A mark's updated_at is when its target completed, not when it was
// committed, so "w" has the mark made first committed last.
func TestAtATieOfTwoLookbacksTheStoresAgreeOnTheDebt(t *testing.T) {
	at := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	h := int64(3_600_000)
	base := pipeline.Mark{VariableID: "v", HwmMs: 5 * h, LastActivityMs: 5 * h, CheckedMs: 4 * h, RecheckedMs: 4 * h, UpdatedAt: at}
	short, long := base, base
	short.RereadMs, short.LookbackMs = 3*h, h
	long.RereadMs, long.LookbackMs = 2*h, 2*h
	long.UpdatedAt = at.Add(300 * time.Millisecond)
	early := long
	early.VariableID, early.UpdatedAt = "w", at.Add(-5*time.Second)
	shortW := short
	shortW.VariableID = "w"
	want, wantW := pipeline.MergeMark(short, true, long), pipeline.MergeMark(shortW, true, early)
	want.UpdatedAt, wantW.UpdatedAt = time.Time{}, time.Time{}
	check := func(t *testing.T, s store) {
		ctx := context.Background()
		for _, m := range []pipeline.Mark{short, long, shortW, early} {
			if err := s.Commit(ctx, []pipeline.Mark{m}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffMarks(got, map[string]pipeline.Mark{"v": want, "w": wantW}); d != "" {
			t.Errorf("the stored mark is not MergeMark's:\n%s", d)
		}
	}
	t.Run("file", func(t *testing.T) { check(t, NewFile(filepath.Join(t.TempDir(), "state.json"))) })
	t.Run("clickhouse", func(t *testing.T) {
		s, _ := newClickHouseStore(t)
		check(t, s)
	})
}
