package metadata

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// The schedule of the group, membership and organization lists
// (RefreshOptions.ListEvery), driven as a daemon's cycles drive one
// Refresh: a walk stored at an advancing cycle time.

// refreshRound stores a walk of the given devices of src, taken at at,
// as one cycle does.
func refreshRound(f *Refresh, src *fakeFleet, at time.Time, devices ...string) error {
	snap := snapshotOf(src, devices...)
	snap.At = at
	return WriteSnapshot(context.Background(), f, snap)
}

// takeLists returns the list requests src served since the last call.
func takeLists(src *fakeFleet) map[string]int {
	src.mu.Lock()
	defer src.mu.Unlock()
	out := src.lists
	src.lists = map[string]int{}
	return out
}

// fixtureListing is what one listing of fleetFixture asks: the groups,
// g1's members, the organizations and o1's devices.
var fixtureListing = map[string]int{listGroups: 1, listMembers: 1, listOrgs: 1, listOrgDevices: 1}

func TestRefreshListsGroupsAndOrganizationsOnlyOnceListEveryHasPassed(t *testing.T) {
	src, store := fleetFixture()
	src.orgsErr, src.orgs = nil, []Organization{{ID: "o1"}}
	f := NewRefresh(src, store, RefreshOptions{ListEvery: time.Hour}, nil)
	listings := 0
	for _, step := range []struct {
		after time.Duration
		lists bool
	}{
		{0, true},
		{5 * time.Minute, false},
		{59*time.Minute + 59*time.Second, false},
		{time.Hour, true},
		{time.Hour + 5*time.Minute, false},
		// A clock that went back past the listing lists again rather
		// than keep it for longer than ListEvery.
		{50 * time.Minute, true},
		{time.Hour + 49*time.Minute, false},
		{time.Hour + 50*time.Minute, true},
	} {
		if err := refreshRound(f, src, t0.Add(step.after), "A", "B", "C"); err != nil {
			t.Fatalf("cycle at +%s: %v", step.after, err)
		}
		want := map[string]int{}
		if step.lists {
			want = fixtureListing
			listings++
		}
		if got := takeLists(src); !maps.Equal(got, want) {
			t.Errorf("cycle at +%s listed %v, want %v", step.after, got, want)
		}
		// The tables are written when listed, not from the kept listing.
		if store.groupWrites != listings || store.orgWrites != listings {
			t.Errorf("cycle at +%s: groups written %d times, organizations %d, want %d each (once per listing)",
				step.after, store.groupWrites, store.orgWrites, listings)
		}
		if got := store.devices["C"].Organization; got != "o1" {
			t.Errorf("cycle at +%s: device C in organization %q, want o1", step.after, got)
		}
	}
}

func TestRefreshRetriesAFailedListingOnTheNextCycle(t *testing.T) {
	readable := func(s *fakeFleet) { s.orgsErr, s.orgs = nil, []Organization{{ID: "o1"}} }
	for _, c := range []struct {
		name  string
		fail  func(*fakeFleet, *fakeFleetStore)
		mend  func(*fakeFleet, *fakeFleetStore)
		table func(*fakeFleetStore) int
	}{
		{"group list", func(src *fakeFleet, _ *fakeFleetStore) { src.groupsErr = errors.New("GET /device_groups/: HTTP 500") },
			func(src *fakeFleet, _ *fakeFleetStore) { src.groupsErr = nil }, func(s *fakeFleetStore) int { return s.groupWrites }},
		{"organization list", func(src *fakeFleet, _ *fakeFleetStore) { src.orgsErr = errors.New("GET /organizations/: HTTP 500") },
			func(src *fakeFleet, _ *fakeFleetStore) { readable(src) }, func(s *fakeFleetStore) int { return s.orgWrites }},
		// Listed whole, but its table not written: listed again, so that
		// the table does not wait ListEvery for the next listing.
		{"group write", func(_ *fakeFleet, s *fakeFleetStore) { s.groupsWriteErr = errors.New("ClickHouse: timeout") },
			func(_ *fakeFleet, s *fakeFleetStore) { s.groupsWriteErr = nil }, func(s *fakeFleetStore) int { return s.groupWrites }},
		{"organization write", func(src *fakeFleet, s *fakeFleetStore) {
			readable(src)
			s.orgsWriteErr = errors.New("ClickHouse: timeout")
		},
			func(_ *fakeFleet, s *fakeFleetStore) { s.orgsWriteErr = nil }, func(s *fakeFleetStore) int { return s.orgWrites }},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, store := fleetFixture()
			f := NewRefresh(src, store, RefreshOptions{ListEvery: time.Hour}, nil)
			c.fail(src, store)
			var me *pipeline.MetadataError
			if err := refreshRound(f, src, t0, "A", "B", "C"); !errors.As(err, &me) {
				t.Fatalf("first cycle: %v, want a *pipeline.MetadataError for the failed %s", err, c.name)
			}
			if got := takeLists(src); got[listGroups] != 1 || got[listOrgs] != 1 {
				t.Fatalf("first cycle listed %v, want the groups and organizations once each", got)
			}
			c.mend(src, store)
			if err := refreshRound(f, src, t0.Add(5*time.Minute), "A", "B", "C"); err != nil {
				t.Fatalf("second cycle: %v", err)
			}
			if got := takeLists(src); !maps.Equal(got, fixtureListing) {
				t.Fatalf("the cycle after a failed %s listed %v, want %v (a failure is retried at once)", c.name, got, fixtureListing)
			}
			if n := c.table(store); n != 1 {
				t.Fatalf("the table of the failed %s was written %d times, want once, by the retry", c.name, n)
			}
			if err := refreshRound(f, src, t0.Add(10*time.Minute), "A", "B", "C"); err != nil {
				t.Fatalf("third cycle: %v", err)
			}
			if got := takeLists(src); len(got) != 0 {
				t.Fatalf("the cycle after a good listing listed %v, want nothing within ListEvery", got)
			}
		})
	}
}

func TestRefreshDoesNotAskARefusedOrganizationListAgainWithinListEvery(t *testing.T) {
	src, store := fleetFixture() // the token may not read the organizations
	f := NewRefresh(src, store, RefreshOptions{ListEvery: time.Hour}, nil)
	asked := 0
	for _, after := range []time.Duration{0, 5 * time.Minute, 30 * time.Minute, time.Hour, time.Hour + 5*time.Minute} {
		if err := refreshRound(f, src, t0.Add(after), "A", "B", "C"); err != nil {
			t.Fatalf("cycle at +%s: a 403 on organizations failed it: %v", after, err)
		}
		asked += takeLists(src)[listOrgs]
		want := 1
		if after >= time.Hour {
			want = 2
		}
		if asked != want {
			t.Fatalf("by the cycle at +%s the refused organization list was asked %d times, want %d", after, asked, want)
		}
	}
	if store.orgWrites != 0 {
		t.Fatalf("organizations were written %d times without permission to read them", store.orgWrites)
	}
}

func TestRefreshWithoutListEveryListsEveryCycle(t *testing.T) {
	src, store := fleetFixture()
	f := NewRefresh(src, store, RefreshOptions{}, nil)
	// The same cycle time twice: 0 lists even then.
	for i, after := range []time.Duration{0, time.Minute, time.Minute} {
		if err := refreshRound(f, src, t0.Add(after), "A", "B", "C"); err != nil {
			t.Fatalf("cycle %d: %v", i+1, err)
		}
		if got := takeLists(src); !maps.Equal(got, fixtureListing) {
			t.Fatalf("cycle %d listed %v, want %v", i+1, got, fixtureListing)
		}
		if store.groupWrites != i+1 {
			t.Fatalf("after cycle %d groups written %d times, want every cycle", i+1, store.groupWrites)
		}
	}
}

func TestRefreshGivesADeviceNewToTheWalkItsOrganizationFromTheKeptListing(t *testing.T) {
	src, store := fleetFixture() // o1 lists A, B and C
	f := NewRefresh(src, store, RefreshOptions{ListEvery: time.Hour}, nil)
	if err := refreshRound(f, src, t0, "A", "B"); err != nil {
		t.Fatal(err)
	}
	takeLists(src)
	// C enters the walk (it was out of it), and D is created after the
	// listing: the kept listing knows C's organization, not D's.
	src.devices = append(src.devices, pipeline.Device{ID: "D", Label: "dev-D"})
	src.orgDevices["o1"] = append(src.orgDevices["o1"], "D")
	if err := refreshRound(f, src, t0.Add(5*time.Minute), "A", "B", "C", "D"); err != nil {
		t.Fatal(err)
	}
	if got := takeLists(src); len(got) != 0 {
		t.Fatalf("a cycle within ListEvery listed %v", got)
	}
	for id, want := range map[string]string{"A": "o1", "B": "o1", "C": "o1", "D": ""} {
		if got := store.devices[id].Organization; got != want {
			t.Errorf("between listings device %s is in organization %q, want %q", id, got, want)
		}
	}
	// The next listing finds D's.
	if err := refreshRound(f, src, t0.Add(time.Hour), "A", "B", "C", "D"); err != nil {
		t.Fatal(err)
	}
	if got := store.devices["D"].Organization; got != "o1" {
		t.Errorf("after the next listing device D is in organization %q, want o1", got)
	}
}
