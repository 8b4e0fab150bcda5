package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Marks keeps the variables' marks in the sync_state table of the
// warehouse that holds the data, so marks and points live and die
// together, and the settled watermark in sync_watermark. It is the
// state package's ClickHouse store (state.ClickHouse), which adds the
// lease; it lives here, beside its tables' DDL, because the state package
// imports this one and this one may import nothing of state (the rule in
// cmd/fleetsync/deps_test.go): a change to the columns and to the
// statements that write them is then one change in one file.
//
// A row's version is its mark (hwm_ms), so when ClickHouse merges the rows of
// a variable it keeps the greatest mark; readers take max(hwm_ms) so an
// unmerged smaller mark, from a slow concurrent writer say, is never seen
// either. MergeMark can also raise the winner's reread_ms to the loser's,
// which that merge would lose with the loser's row, so Commit reads the
// stored marks of what it commits and inserts each merged with its stored
// one: the row that survives ClickHouse's merge (of rows with equal
// versions, the one inserted last) is then the merged mark, and readers
// pick, of a variable's rows, the one of the greatest mark, of the latest
// read, with the greatest reread_ms: the merged one too. Two commits of one
// variable at the same moment (each between the other's read and INSERT)
// can still lose the greater reread_ms: the mark then owes more than it
// must, its next re-read starts lower, and only a settled watermark
// published in between can be passed, by a point that was never promised
// (docs/reliability.md, the settled watermark).
type Marks struct{ *pool }

var (
	_ pipeline.StateStore      = (*Marks)(nil)
	_ pipeline.WatermarkWriter = (*Marks)(nil)
)

// syncStateTable holds the marks, a row per variable and commit.
var syncStateTable = tableDef{
	name: TableSyncState,
	columns: []column{
		{name: "variable_id", typ: "String"},
		{name: "hwm_ms", typ: "Int64"},
		{name: "last_activity_ms", typ: "Int64"},
		{name: "updated_at", typ: "DateTime('UTC')"},
		{name: "version", typ: "UInt64"},
		// What the read that wrote the row covered (pipeline.Mark):
		// its end, and the earliest point it saw past that end.
		{name: "checked_ms", typ: "Int64"},
		{name: "future_ms", typ: "Int64"},
		// Where the next read must start at the latest
		// (pipeline.Mark.RereadMs); 0 in rows written before it.
		{name: "reread_ms", typ: "Int64"},
		// The end of the last re-read of the variable's lookback
		// (pipeline.Mark.RecheckedMs); 0 in rows written before it,
		// which makes the next read a re-read.
		{name: "rechecked_ms", typ: "Int64"},
		// The lookback reread_ms was reckoned under
		// (pipeline.Mark.LookbackMs); 0 in rows written before it.
		{name: "lookback_ms", typ: "Int64"},
	},
	// version is the mark itself (hwm_ms), so a merge keeps the
	// greatest mark of a variable and can never move it backwards.
	engine: "ReplacingMergeTree(version) ORDER BY variable_id",
	// On a cluster a shard reads the marks back from the node it wrote
	// them to, not from a replica of another shard that may lag.
	everywhere: true,
}

// syncWatermarkTable holds the settled watermark (pipeline.Stages.Watermark),
// a row per scope and cycle; FINAL keeps the latest (version: nanoseconds).
var syncWatermarkTable = tableDef{
	name: TableSyncWatermark,
	columns: []column{
		{name: "scope", typ: "String"},
		{name: "settled_before_ms", typ: "Int64"},
		{name: "updated_at", typ: "DateTime('UTC')"},
		{name: "version", typ: "UInt64"},
	},
	engine: "ReplacingMergeTree(version) ORDER BY scope",
}

// Load returns each variable's greatest mark. Its fields come from one row,
// ranked as MergeMark ranks marks (the greatest mark, then the latest read,
// and so on: the merged mark Commit wrote), so that they describe one mark
// and never mix two.
func (s *Marks) Load(ctx context.Context) (map[string]pipeline.Mark, error) {
	marks := map[string]pipeline.Mark{}
	err := s.scan(ctx, "", func(m pipeline.Mark) error {
		marks[m.VariableID] = m
		return nil
	})
	if err != nil {
		return nil, err
	}
	return marks, nil
}

// MarksOf hands fn the mark of each of ids that has one, as Load has it.
// The ids go to the server as an external table of the query (the native
// protocol's external data), not in its text, which a chunk of 20 000 ids
// would take past max_query_size: one query a chunk, about 30 ms for
// 20 000 ids among 10^6 marks on 18.16. It is not retried, as Load is
// not: a failure fails the cycle, whose next run reads again.
func (s *Marks) MarksOf(ctx context.Context, ids []string, fn func(pipeline.Mark) error) error {
	if len(ids) == 0 {
		return nil
	}
	t, err := ext.NewTable("marks_of", ext.Column("id", "String"))
	if err != nil {
		return fmt.Errorf("load marks: %w", err)
	}
	for _, id := range ids {
		if err := t.Append(id); err != nil {
			return fmt.Errorf("load marks: %w", err)
		}
	}
	return s.scan(clickhouse.Context(ctx, clickhouse.WithExternalTable(t)), "WHERE variable_id IN marks_of", fn)
}

// scan hands fn each variable's mark (see Load) of the rows where selects.
func (s *Marks) scan(ctx context.Context, where string, fn func(pipeline.Mark) error) error {
	table := s.table(TableSyncState)
	const key = "(version, checked_ms, updated_at, last_activity_ms, future_ms, reread_ms, rechecked_ms, lookback_ms)"
	rows, err := s.conn.Query(ctx,
		"SELECT variable_id, max(hwm_ms), argMax(last_activity_ms, "+key+"), argMax(checked_ms, "+key+"), argMax(future_ms, "+key+"), argMax(reread_ms, "+key+"), argMax(rechecked_ms, "+key+"), argMax(lookback_ms, "+key+"), max(updated_at) FROM "+
			table+" "+where+" GROUP BY variable_id")
	if err != nil {
		return fmt.Errorf("load marks from %s (run `fleetsync migrate` if the table is missing): %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var m pipeline.Mark
		if err := rows.Scan(&m.VariableID, &m.HwmMs, &m.LastActivityMs, &m.CheckedMs, &m.FutureMs, &m.RereadMs, &m.RecheckedMs, &m.LookbackMs, &m.UpdatedAt); err != nil {
			return fmt.Errorf("load marks from %s: %w", table, err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load marks from %s: %w", table, err)
	}
	return nil
}

// Commit inserts the marks, each merged with the stored one (MergeMark),
// retrying retryable failures. A mark smaller than the stored one is then
// the stored one, but for a greater reread_ms it brings (see Marks).
func (s *Marks) Commit(ctx context.Context, marks []pipeline.Mark) error {
	if len(marks) == 0 {
		return nil
	}
	table := s.table(TableSyncState)
	now := time.Now().UTC()
	ids := make([]string, len(marks))
	for i, m := range marks {
		ids[i] = m.VariableID
	}
	err := s.retry(ctx, TableSyncState, func(ctx context.Context) error {
		merged := make(map[string]pipeline.Mark, len(marks))
		if err := s.MarksOf(ctx, ids, func(m pipeline.Mark) error {
			merged[m.VariableID] = m
			return nil
		}); err != nil {
			return err
		}
		b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+table+" (variable_id, hwm_ms, last_activity_ms, updated_at, version, checked_ms, future_ms, reread_ms, rechecked_ms, lookback_ms)")
		if err != nil {
			return err
		}
		defer b.Abort()
		for _, m := range marks {
			if m.UpdatedAt.IsZero() {
				m.UpdatedAt = now
			}
			stored, ok := merged[m.VariableID]
			m = pipeline.MergeMark(stored, ok, m)
			merged[m.VariableID] = m
			if err := b.Append(m.VariableID, m.HwmMs, m.LastActivityMs, m.UpdatedAt.UTC(), markVersion(m.HwmMs), m.CheckedMs, m.FutureMs, m.RereadMs, m.RecheckedMs, m.LookbackMs); err != nil {
				return fmt.Errorf("mark of %s: %w", m.VariableID, err)
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("commit %d marks to %s: %w", len(marks), table, err)
	}
	return nil
}

// markVersion orders marks for ReplacingMergeTree: the greater mark, the
// greater version. Marks before 1970 do not occur; they sort first.
func markVersion(hwmMs int64) uint64 {
	if hwmMs < 0 {
		return 0
	}
	return uint64(hwmMs)
}

// PublishWatermark records the settled watermark of scope (see
// pipeline.WatermarkWriter) in sync_watermark, retrying retryable
// failures. The row's version is the time it was written, so FINAL reads
// the latest whatever its value: a raised sync.lookback lowers it.
func (s *Marks) PublishWatermark(ctx context.Context, scope string, settledBeforeMs int64) error {
	now := time.Now().UTC()
	err := s.insertRows(ctx, TableSyncWatermark, "scope, settled_before_ms, updated_at, version", 1, func(int) []any {
		return []any{scope, settledBeforeMs, now, uint64(now.UnixNano())}
	})
	if err != nil {
		return fmt.Errorf("record the settled watermark: %w", err)
	}
	return nil
}

// Watermark is the settled watermark last recorded (the least over the
// scopes, each its latest row), false when none is.
func (s *Marks) Watermark(ctx context.Context) (settledBeforeMs int64, ok bool, err error) {
	table := s.table(TableSyncWatermark)
	var n uint64
	err = s.conn.QueryRow(ctx, "SELECT count(), min(settled_before_ms) FROM (SELECT settled_before_ms FROM "+table+" FINAL)").Scan(&n, &settledBeforeMs)
	if err != nil {
		return 0, false, fmt.Errorf("read the settled watermark from %s: %w", table, err)
	}
	return settledBeforeMs, n > 0, nil
}
