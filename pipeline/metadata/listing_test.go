package metadata

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestWriteSnapshotLogsTheOrganizationTokenHintOncePerProcess(t *testing.T) {
	src, store := fleetFixture()
	core, logs := observer.New(zap.InfoLevel)
	f := NewRefresh(src, store, RefreshOptions{}, zap.New(core))
	for range 3 {
		if err := WriteSnapshot(context.Background(), f, snapshotOf(src, "A", "B", "C")); err != nil {
			t.Fatalf("a 403 on organizations failed the snapshot: %v", err)
		}
	}
	hints := logs.FilterMessageSnippet("organization- or account-scoped token").Len()
	if hints != 1 {
		t.Fatalf("the token hint was logged %d times over 3 cycles, want once", hints)
	}
	if store.orgWrites != 0 {
		t.Fatalf("organizations were written %d times without permission to read them", store.orgWrites)
	}
	src.orgsErr = nil
	src.orgs = []Organization{{ID: "o1"}}
	if err := WriteSnapshot(context.Background(), f, snapshotOf(src, "A", "B", "C")); err != nil || store.orgWrites != 1 {
		t.Fatalf("with a scoped token: err %v, %d organization writes; want 1", err, store.orgWrites)
	}
}

func TestWriteSnapshotToleratesGroupsAndOrganizationsDeletedMidWalk(t *testing.T) {
	src, store, f := refreshedFixture(t)
	ctx := context.Background()
	// Organization o1 is deleted and its devices move to o2; a group is
	// listed and deleted before its members are read.
	src.orgDevices = map[string][]string{"o2": {"A", "B"}}
	src.groups[0].Organization = "o2"
	src.vanishing = []DeviceGroup{{ID: "g-gone", Organization: "o2"}}
	if err := WriteSnapshot(ctx, f, snapshotOf(src, "A", "B", "C")); err != nil {
		t.Fatalf("a group and an organization deleted mid-walk failed the snapshot: %v", err)
	}
	if len(store.groups) != 1 || store.groups[0].ID != "g1" {
		t.Fatalf("stored groups %+v, want only g1", store.groups)
	}
	for id, want := range map[string]string{"A": "o2", "B": "o2", "C": ""} {
		if got := store.devices[id].Organization; got != want {
			t.Errorf("device %s in organization %q, want %q", id, got, want)
		}
	}
}
