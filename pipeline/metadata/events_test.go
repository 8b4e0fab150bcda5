package metadata

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSyncEventLoadsOnlyNewLogsAndStopsAtTheMarkWhenNewestFirst(t *testing.T) {
	src, store := newFakeFleet(), newFakeFleetStore()
	src.logs["e1"] = logsAt("a", 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
	f := NewEventSync(src, store, store, EventOptions{Events: []string{"e1"}}, nil)
	ctx := context.Background()

	n, err := f.SyncEvent(ctx, "e1", store.marks["e1"])
	if err != nil || n != 10 {
		t.Fatalf("first sync: %d new, %v; want 10", n, err)
	}
	if m := store.marks["e1"]; m.CreatedAtUs != t0.Add(10*time.Minute).UnixMicro() || !reflect.DeepEqual(m.IDs, []string{"a-10"}) {
		t.Fatalf("mark after the first sync: %+v", m)
	}
	src.pages["e1"] = 0
	n, err = f.SyncEvent(ctx, "e1", store.marks["e1"])
	if err != nil || n != 0 {
		t.Fatalf("idle sync: %d new, %v; want 0", n, err)
	}
	if src.pages["e1"] != 1 {
		t.Fatalf("idle sync read %d pages, want 1 (it should stop at the first log older than the mark)", src.pages["e1"])
	}
	if store.logWrites != 1 {
		t.Fatalf("idle sync wrote logs (%d writes)", store.logWrites)
	}

	// Two newer logs, and one sharing the mark's createdAt with a new id.
	tie := logsAt("b", 10)
	src.logs["e1"] = append(append(logsAt("a", 12, 11), tie...), src.logs["e1"]...)
	n, err = f.SyncEvent(ctx, "e1", store.marks["e1"])
	if err != nil || n != 3 {
		t.Fatalf("third sync: %d new, %v; want 3 (two newer, one tie)", n, err)
	}
	want := []string{"a-1", "a-10", "a-11", "a-12", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7", "a-8", "a-9", "b-10"}
	if got := storedIDs(store, "e1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	if m := store.marks["e1"]; m.CreatedAtUs != t0.Add(12*time.Minute).UnixMicro() || !reflect.DeepEqual(m.IDs, []string{"a-12"}) {
		t.Fatalf("mark after the third sync: %+v", m)
	}
}

func TestSyncEventReadsEveryPageWhenTheLogIsNotNewestFirst(t *testing.T) {
	src, store := newFakeFleet(), newFakeFleetStore()
	src.logs["e1"] = logsAt("a", 1, 2, 3, 4, 5, 6, 7)
	f := NewEventSync(src, store, store, EventOptions{}, nil)
	ctx := context.Background()
	if n, err := f.SyncEvent(ctx, "e1", EventMark{}); err != nil || n != 7 {
		t.Fatalf("first sync: %d, %v", n, err)
	}
	src.logs["e1"] = append(src.logs["e1"], logsAt("a", 8)...)
	src.pages["e1"] = 0
	n, err := f.SyncEvent(ctx, "e1", store.marks["e1"])
	if err != nil || n != 1 {
		t.Fatalf("second sync: %d new, %v; want the one newer log at the end", n, err)
	}
	if src.pages["e1"] != 3 {
		t.Fatalf("read %d pages of an oldest-first log, want all 3", src.pages["e1"])
	}
}

func TestSyncEventsReportsAnUnknownEventAndSyncsTheOthers(t *testing.T) {
	src, store := newFakeFleet(), newFakeFleetStore()
	src.logs["e1"] = logsAt("a", 2, 1)
	f := NewEventSync(src, store, store, EventOptions{Events: []string{"~nope", "e1"}}, nil)
	err := f.Sync(context.Background())
	if err == nil || len(store.logs["e1"]) != 2 {
		t.Fatalf("Sync = %v, stored %d logs of e1; want an error naming ~nope and 2 logs", err, len(store.logs["e1"]))
	}
	if got := err.Error(); !strings.Contains(got, "~nope") {
		t.Fatalf("error %q does not name the event", got)
	}
}
