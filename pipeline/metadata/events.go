package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// EventLog is one entry of an event's log history.
type EventLog struct {
	// Event is the event's key as configured (an id or a ~label): the
	// service has no event listing, so the configured key names the event.
	Event     string
	ID        string
	CreatedAt time.Time
	// Raw is the whole log object as compact JSON text: the service does not
	// document its fields beyond id and createdAt, so nothing is dropped.
	Raw json.RawMessage
}

// EventMark is the high-water mark of one event's logs.
type EventMark struct {
	Event string
	// CreatedAtUs is the greatest createdAt loaded, POSIX microseconds.
	CreatedAtUs int64
	// IDs are the logs loaded whose createdAt equals CreatedAtUs, so that a
	// log with the same createdAt that shows up later is still loaded while
	// those already loaded are not loaded again.
	IDs []string
}

// EventOptions configure the event-log stage.
type EventOptions struct {
	// Events are the event keys (ids or ~labels) whose logs are synced.
	Events []string
}

// EventSync is the event-log stage of a cycle: an incremental sync of each
// configured event's logs, by a mark per event. It is the Syncer's
// pipeline.Stages.Events.
type EventSync struct {
	src   EventSource
	logs  EventLogWriter
	marks EventMarkStore
	opts  EventOptions
	log   *zap.Logger
}

// NewEventSync wires an EventSync. logger may be nil.
func NewEventSync(src EventSource, logs EventLogWriter, marks EventMarkStore, opts EventOptions, logger *zap.Logger) *EventSync {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &EventSync{src: src, logs: logs, marks: marks, opts: opts, log: logger}
}

var _ pipeline.EventSyncer = (*EventSync)(nil)

// Sync loads the new logs of every configured event. One event's failure
// (an unknown key, say) does not stop the others.
func (f *EventSync) Sync(ctx context.Context) error {
	if len(f.opts.Events) == 0 {
		return nil
	}
	marks, err := f.marks.EventMarks(ctx)
	if err != nil {
		return fmt.Errorf("read event log marks: %w", err)
	}
	var errs []error
	total := 0
	for _, ev := range dedup(f.opts.Events) {
		n, err := f.SyncEvent(ctx, ev, marks[ev])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		total += n
	}
	f.log.Info("event logs synced", zap.Int("events", len(f.opts.Events)), zap.Int("new_logs", total), zap.Int("failed", len(errs)))
	return errors.Join(errs...)
}

// errEnough stops an event log listing once the rest is known to be old.
var errEnough = errors.New("the rest of the log is older than the mark")

// SyncEvent loads the logs of one event that are newer than mark and
// returns how many it stored. A log is new when its createdAt is after the
// mark, or equal to it with an id the mark does not list.
//
// The order of the log listing is not documented. When the logs seen so far
// come newest first, the listing stops at the first log older than the
// mark, so an idle event costs one request; in any other order every page is
// read (and only the new logs are stored).
func (f *EventSync) SyncEvent(ctx context.Context, event string, mark EventMark) (int, error) {
	mark.Event = event
	var fresh []EventLog
	var prev int64
	descending, ascending, first := false, false, true
	err := f.src.ListEventLogs(ctx, event, func(l EventLog) error {
		l.Event = event
		if l.ID == "" {
			// The table's key is (event, id); a log without an id is keyed
			// by its content so that distinct logs stay distinct.
			h := fnv.New64a()
			h.Write(l.Raw)
			l.ID = fmt.Sprintf("content-%016x", h.Sum64())
		}
		if l.CreatedAt.IsZero() {
			// No usable createdAt: it cannot be placed against the mark,
			// so it is stored every time (the table deduplicates it).
			fresh = append(fresh, l)
			return nil
		}
		us := l.CreatedAt.UnixMicro()
		if !first {
			descending = descending || us < prev
			ascending = ascending || us > prev
		}
		first, prev = false, us
		switch {
		case us > mark.CreatedAtUs, us == mark.CreatedAtUs && !slices.Contains(mark.IDs, l.ID):
			fresh = append(fresh, l)
		case us < mark.CreatedAtUs && descending && !ascending:
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return 0, fmt.Errorf("event %s: %w", event, err)
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	// The logs first, then the mark, so that a mark never covers a log
	// that was not stored; a log stored twice (a crash between the two)
	// is one row under FINAL.
	if err := f.logs.WriteEventLogs(ctx, fresh); err != nil {
		return 0, fmt.Errorf("event %s: store %d logs: %w", event, len(fresh), err)
	}
	if err := f.marks.CommitEventMark(ctx, advance(mark, fresh)); err != nil {
		return 0, fmt.Errorf("event %s: commit its mark after storing %d logs: %w", event, len(fresh), err)
	}
	return len(fresh), nil
}

// advance moves mark over the fresh logs.
func advance(mark EventMark, fresh []EventLog) EventMark {
	next := EventMark{Event: mark.Event, CreatedAtUs: mark.CreatedAtUs, IDs: slices.Clone(mark.IDs)}
	for _, l := range fresh {
		if l.CreatedAt.IsZero() {
			continue
		}
		switch us := l.CreatedAt.UnixMicro(); {
		case us > next.CreatedAtUs:
			next.CreatedAtUs, next.IDs = us, []string{l.ID}
		case us == next.CreatedAtUs && !slices.Contains(next.IDs, l.ID):
			next.IDs = append(next.IDs, l.ID)
		}
	}
	sort.Strings(next.IDs)
	return next
}
