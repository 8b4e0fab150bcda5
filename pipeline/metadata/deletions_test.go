package metadata

import (
	"context"
	"reflect"
	"testing"
)

func TestWriteSnapshotMarksDeletedOnlyWhatTheAccountNoLongerHas(t *testing.T) {
	src, store, f := refreshedFixture(t)
	ctx := context.Background()
	if got := store.devices["C"].Organization; got != "o1" {
		t.Fatalf("device C's organization %q, want o1 (mapped through the organization a group belongs to)", got)
	}

	// C is deleted in the source, and A loses its variable A2. The next
	// walk is scoped to A: B is merely out of scope.
	src.devices = src.devices[:2]
	src.vars["A"] = src.vars["A"][:1]
	snap := snapshotOf(src, "A")
	snap.Scoped = true
	if err := WriteSnapshot(ctx, f, snap); err != nil {
		t.Fatal(err)
	}
	if got, want := deletedSet(store.deletedDevs), []string{"C"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("deleted devices %v, want %v (B is only out of scope)", got, want)
	}
	if got, want := deletedSet(store.deletedVars), []string{"A2", "C1", "C2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("deleted variables %v, want %v", got, want)
	}

	// Unscoped, a device missing from the walk is deleted without another listing.
	listings := src.listings
	src.devices = src.devices[:1]
	if err := WriteSnapshot(ctx, f, snapshotOf(src, "A")); err != nil {
		t.Fatal(err)
	}
	if got, want := deletedSet(store.deletedDevs), []string{"B", "C"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("deleted devices %v, want %v", got, want)
	}
	if src.listings != listings {
		t.Fatalf("an unscoped snapshot listed the devices again")
	}
}

func TestWriteSnapshotNeverDeletesEverythingOnAnEmptyListing(t *testing.T) {
	_, store, f := refreshedFixture(t)
	ctx := context.Background()
	if err := WriteSnapshot(ctx, f, Snapshot{At: t0}); err != nil {
		t.Fatal(err)
	}
	if got := deletedSet(store.deletedDevs); len(got) != 0 {
		t.Fatalf("an empty listing marked %v deleted", got)
	}
}
