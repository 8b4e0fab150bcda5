package state

import (
	"context"
	"fmt"
	"time"

	chload "github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
)

// The events' marks go through the state store like the variables'.
var _ metadata.EventMarkStore = (*ClickHouse)(nil)

// EventMarks returns the event logs' marks by event key, from the
// event_state table. They live in the warehouse whatever state.backend is,
// beside the logs they cover.
func (s *ClickHouse) EventMarks(ctx context.Context) (map[string]metadata.EventMark, error) {
	table := s.c.Table(chload.TableEventState)
	rows, err := s.c.Conn().Query(ctx, "SELECT event, hwm_us, hwm_ids FROM "+table+" FINAL")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	out := map[string]metadata.EventMark{}
	for rows.Next() {
		var m metadata.EventMark
		if err := rows.Scan(&m.Event, &m.CreatedAtUs, &m.IDs); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		out[m.Event] = m
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	return out, nil
}

// CommitEventMark stores an event's new mark; the caller has stored the
// logs below it. The row's version is the client's next one, so the later
// of two commits wins under FINAL.
func (s *ClickHouse) CommitEventMark(ctx context.Context, mark metadata.EventMark) error {
	ids := mark.IDs
	if ids == nil {
		ids = []string{}
	}
	version, now := s.c.NextVersion(), time.Now().UTC()
	return s.c.InsertRows(ctx, chload.TableEventState, "event, hwm_us, hwm_ids, updated_at, version", 1, func(int) []any {
		return []any{mark.Event, mark.CreatedAtUs, ids, now, version}
	})
}
