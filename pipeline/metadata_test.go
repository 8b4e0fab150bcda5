package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// fakeFleet is a FleetSource in memory. Event logs are served in the order
// of logs[event], pageSize per page; pages counts the pages served.
type fakeFleet struct {
	*memSource
	mu      sync.Mutex
	devices []Device
	vars    map[string][]Variable
	groups  []DeviceGroup
	// vanishing groups are listed but deleted before their members are.
	vanishing  []DeviceGroup
	orgs       []Organization
	orgsErr    error
	groupsErr  error
	orgDevices map[string][]string
	logs       map[string][]EventLog
	pageSize   int
	pages      map[string]int
	listings   int
	// lists counts the group, membership and organization list requests
	// by kind (see countList).
	lists map[string]int
}

// The kinds of list request lists counts.
const (
	listGroups     = "groups"
	listMembers    = "group members"
	listOrgs       = "organizations"
	listOrgDevices = "organization devices"
)

func (f *fakeFleet) countList(kind string) {
	f.mu.Lock()
	f.lists[kind]++
	f.mu.Unlock()
}

func (f *fakeFleet) Devices(_ context.Context, fn func(Device) error) error {
	f.mu.Lock()
	f.listings++
	ds := slices.Clone(f.devices)
	f.mu.Unlock()
	for _, d := range ds {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

// Walk lists every device and its variables: the scope and the choice of
// listing are the adapter's (extract/fleet), tested there.
func (f *fakeFleet) Walk(ctx context.Context, _ Scope, sink WalkSink) error {
	var devices []Device
	if err := f.Devices(ctx, func(d Device) error { devices = append(devices, d); return nil }); err != nil {
		return err
	}
	if err := sink.Devices(ctx, devices); err != nil {
		return err
	}
	for _, d := range devices {
		f.mu.Lock()
		var vars []Variable
		for _, v := range f.vars[d.ID] {
			v.DeviceID, v.DeviceLabel = d.ID, d.Label
			vars = append(vars, v)
		}
		f.mu.Unlock()
		if err := sink.Variables(ctx, vars); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeFleet) GroupDeviceIDs(_ context.Context, group string) ([]string, error) {
	f.countList(listMembers)
	for _, g := range f.groups {
		if g.ID == group {
			return slices.Clone(g.Members), nil
		}
	}
	return nil, fmt.Errorf("group %s: %w", group, notFoundErr{})
}

func (f *fakeFleet) OrganizationDeviceIDs(_ context.Context, org string) ([]string, error) {
	f.countList(listOrgDevices)
	ids, ok := f.orgDevices[org]
	if !ok {
		return nil, fmt.Errorf("organization %s: %w", org, notFoundErr{})
	}
	return slices.Clone(ids), nil
}

// notFoundErr is the source's 404.
type notFoundErr struct{}

func (notFoundErr) Error() string  { return "HTTP 404" }
func (notFoundErr) NotFound() bool { return true }

func (f *fakeFleet) ListDeviceGroups(_ context.Context, fn func(DeviceGroup) error) error {
	f.countList(listGroups)
	if f.groupsErr != nil {
		return f.groupsErr
	}
	for _, g := range append(slices.Clone(f.groups), f.vanishing...) {
		g.Members = nil
		if err := fn(g); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeFleet) ListOrganizations(_ context.Context, fn func(Organization) error) error {
	f.countList(listOrgs)
	if f.orgsErr != nil {
		return f.orgsErr
	}
	for _, o := range f.orgs {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeFleet) ListEventLogs(_ context.Context, event string, fn func(EventLog) error) error {
	f.mu.Lock()
	logs, ok := f.logs[event]
	logs = slices.Clone(logs)
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("event %s: 404", event)
	}
	if len(logs) == 0 {
		f.countPage(event)
	}
	for i, l := range logs {
		if i%f.pageSize == 0 {
			f.countPage(event)
		}
		if err := fn(l); err != nil {
			return fmt.Errorf("logs of %s: %w", event, err)
		}
	}
	return nil
}

func (f *fakeFleet) countPage(event string) {
	f.mu.Lock()
	f.pages[event]++
	f.mu.Unlock()
}

// fakeFleetStore is a FleetStore in memory.
type fakeFleetStore struct {
	mu           sync.Mutex
	devices      map[string]Device
	deletedDevs  map[string]bool
	vars         map[string]Variable
	deletedVars  map[string]bool
	orgWrites    int
	groupWrites  int
	groups       []DeviceGroup
	marks        map[string]EventMark
	logs         map[string]map[string]EventLog
	logWrites    int
	devicesWrite int
	// devicesWritten and varsWritten count the rows written change by
	// change.
	devicesWritten, varsWritten int
	// orgsWriteErr and groupsWriteErr fail the writes of those tables.
	orgsWriteErr, groupsWriteErr error
}

func newFakeFleetStore() *fakeFleetStore {
	return &fakeFleetStore{devices: map[string]Device{}, deletedDevs: map[string]bool{}, vars: map[string]Variable{},
		deletedVars: map[string]bool{}, marks: map[string]EventMark{}, logs: map[string]map[string]EventLog{}}
}

func (s *fakeFleetStore) WriteDevices(_ context.Context, ds []Device, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devicesWrite++
	for _, d := range ds {
		s.devices[d.ID] = d
		delete(s.deletedDevs, d.ID)
	}
	return nil
}

func (s *fakeFleetStore) WriteVariables(_ context.Context, vs []Variable, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range vs {
		s.vars[v.ID] = v
		delete(s.deletedVars, v.ID)
	}
	return nil
}

func (s *fakeFleetStore) LiveDevices(context.Context) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for id, d := range s.devices {
		if !s.deletedDevs[id] {
			out[id] = d.Organization
		}
	}
	return out, nil
}

// WriteChangedDevices writes the devices whose live row is missing or
// differs, as the warehouse does.
func (s *fakeFleetStore) WriteChangedDevices(ctx context.Context, ds []Device, at time.Time) (MetadataDiff, error) {
	s.mu.Lock()
	var diff MetadataDiff
	var changed []Device
	walked := map[string]bool{}
	for _, d := range ds {
		walked[d.ID] = true
		if old, ok := s.devices[d.ID]; !ok || s.deletedDevs[d.ID] || !reflect.DeepEqual(old, d) {
			changed = append(changed, d)
		}
	}
	for id := range s.devices {
		if !walked[id] && !s.deletedDevs[id] {
			diff.Missing = append(diff.Missing, StoredRef{ID: id})
		}
	}
	s.devicesWritten += len(changed)
	s.mu.Unlock()
	diff.Written = len(changed)
	return diff, s.WriteDevices(ctx, changed, at)
}

// ChangedVariables compares with the live rows as they are now, as the
// warehouse does.
func (s *fakeFleetStore) ChangedVariables(_ context.Context, at time.Time) (VariableChanges, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &fakeChanges{s: s, at: at, live: map[string]Variable{}, seen: map[string]bool{}}
	for id, v := range s.vars {
		if !s.deletedVars[id] {
			c.live[id] = v
		}
	}
	return c, nil
}

type fakeChanges struct {
	s    *fakeFleetStore
	at   time.Time
	live map[string]Variable
	seen map[string]bool
}

func (c *fakeChanges) Write(ctx context.Context, vs []Variable) (int, error) {
	var changed []Variable
	for _, v := range vs {
		c.seen[v.ID] = true
		if old, ok := c.live[v.ID]; !ok || !reflect.DeepEqual(old, v) {
			changed = append(changed, v)
		}
	}
	c.s.mu.Lock()
	c.s.varsWritten += len(changed)
	c.s.mu.Unlock()
	return len(changed), c.s.WriteVariables(ctx, changed, c.at)
}

func (c *fakeChanges) Missing(context.Context) ([]StoredRef, error) {
	var out []StoredRef
	for id, v := range c.live {
		if !c.seen[id] {
			out = append(out, StoredRef{ID: id, DeviceID: v.DeviceID})
		}
	}
	return out, nil
}

func (s *fakeFleetStore) MarkDevicesDeleted(_ context.Context, ids []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.deletedDevs[id] = true
	}
	return nil
}

func (s *fakeFleetStore) MarkVariablesDeleted(_ context.Context, ids []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.deletedVars[id] = true
	}
	return nil
}

func (s *fakeFleetStore) WriteOrganizations(context.Context, []Organization, time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.orgsWriteErr != nil {
		return s.orgsWriteErr
	}
	s.orgWrites++
	return nil
}

func (s *fakeFleetStore) WriteDeviceGroups(_ context.Context, gs []DeviceGroup, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groupsWriteErr != nil {
		return s.groupsWriteErr
	}
	s.groupWrites++
	s.groups = gs
	return nil
}

func (s *fakeFleetStore) EventMarks(context.Context) (map[string]EventMark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]EventMark{}
	for k, v := range s.marks {
		out[k] = v
	}
	return out, nil
}

func (s *fakeFleetStore) WriteEventLogs(_ context.Context, logs []EventLog) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logWrites++
	for _, l := range logs {
		if s.logs[l.Event] == nil {
			s.logs[l.Event] = map[string]EventLog{}
		}
		s.logs[l.Event][l.ID] = l
	}
	return nil
}

func (s *fakeFleetStore) CommitEventMark(_ context.Context, mark EventMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marks[mark.Event] = mark
	return nil
}

// permissionErr is the source's 403 for an ordinary token.
type permissionErr struct{}

func (permissionErr) Error() string          { return "GET /organizations/: HTTP 403" }
func (permissionErr) PermissionDenied() bool { return true }

func newFakeFleet() *fakeFleet {
	return &fakeFleet{memSource: &memSource{points: map[string][]Point{}, rng: rand.New(rand.NewPCG(1, 2))},
		vars: map[string][]Variable{}, orgDevices: map[string][]string{}, logs: map[string][]EventLog{}, pageSize: 3, pages: map[string]int{}, lists: map[string]int{}}
}

var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// logsAt makes logs id-prefix-i created at t0 + minutes[i], in that order.
func logsAt(prefix string, minutes ...int) []EventLog {
	out := make([]EventLog, len(minutes))
	for i, m := range minutes {
		id := fmt.Sprintf("%s-%d", prefix, m)
		out[i] = EventLog{ID: id, CreatedAt: t0.Add(time.Duration(m) * time.Minute), Raw: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id))}
	}
	return out
}

func storedIDs(s *fakeFleetStore, event string) []string {
	var ids []string
	for id := range s.logs[event] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

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

func fleetFixture() (*fakeFleet, *fakeFleetStore) {
	src, store := newFakeFleet(), newFakeFleetStore()
	for _, id := range []string{"A", "B", "C"} {
		src.devices = append(src.devices, Device{ID: id, Label: "dev-" + id})
		src.vars[id] = []Variable{{ID: id + "1", DeviceID: id}, {ID: id + "2", DeviceID: id}}
	}
	src.groups = []DeviceGroup{{ID: "g1", Organization: "o1", Members: []string{"A", "B"}}}
	src.orgDevices = map[string][]string{"o1": {"A", "B", "C"}}
	src.orgsErr = permissionErr{}
	return src, store
}

func snapshotOf(src *fakeFleet, deviceIDs ...string) Snapshot {
	snap := Snapshot{At: t0}
	for _, d := range src.devices {
		if slices.Contains(deviceIDs, d.ID) {
			snap.Devices = append(snap.Devices, d)
			snap.Variables = append(snap.Variables, src.vars[d.ID]...)
		}
	}
	return snap
}

func deletedSet(m map[string]bool) []string {
	var out []string
	for id, d := range m {
		if d {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func TestWriteSnapshotMarksDeletedOnlyWhatTheAccountNoLongerHas(t *testing.T) {
	src, store := fleetFixture()
	f := NewRefresh(src, store, RefreshOptions{}, nil)
	ctx := context.Background()
	if err := WriteSnapshot(ctx, f, snapshotOf(src, "A", "B", "C")); err != nil {
		t.Fatal(err)
	}
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
	src, store := fleetFixture()
	f := NewRefresh(src, store, RefreshOptions{}, nil)
	ctx := context.Background()
	if err := WriteSnapshot(ctx, f, snapshotOf(src, "A", "B", "C")); err != nil {
		t.Fatal(err)
	}
	if err := WriteSnapshot(ctx, f, Snapshot{At: t0}); err != nil {
		t.Fatal(err)
	}
	if got := deletedSet(store.deletedDevs); len(got) != 0 {
		t.Fatalf("an empty listing marked %v deleted", got)
	}
}

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

func TestCycleSyncsThePointsAndThenReportsAMetadataFailure(t *testing.T) {
	src, store := fleetFixture()
	src.groupsErr = errors.New("GET /device_groups/: HTTP 500")
	now := time.UnixMilli(1_700_000_000_000)
	for _, d := range src.devices {
		for _, v := range src.vars[d.ID] {
			src.points[v.ID] = []Point{{TsMs: now.UnixMilli() - 1000, Value: 1, Context: []byte("{}")}}
		}
	}
	w := &memWriter{rows: map[string]map[int64]Row{}}
	st := &memStore{marks: map[string]Mark{}}
	fleet := NewRefresh(src, store, RefreshOptions{}, nil)
	s := NewSyncer(src, w, Stages{Metadata: fleet}, st, SyncOptions{Retention: time.Hour, Now: func() time.Time { return now }}, nil, nil)
	sum, err := s.Cycle(context.Background())
	var me *MetadataError
	if !errors.As(err, &me) {
		t.Fatalf("Cycle error %v, want a *MetadataError", err)
	}
	if len(w.rows) != 6 || sum.Completed != 6 {
		t.Fatalf("loaded %d variables (%d completed), want all 6 despite the metadata failure", len(w.rows), sum.Completed)
	}
	if len(store.devices) != 3 {
		t.Fatalf("stored %d devices, want 3", len(store.devices))
	}
}

func TestWriteSnapshotToleratesGroupsAndOrganizationsDeletedMidWalk(t *testing.T) {
	src, store := fleetFixture()
	f := NewRefresh(src, store, RefreshOptions{}, nil)
	ctx := context.Background()
	if err := WriteSnapshot(ctx, f, snapshotOf(src, "A", "B", "C")); err != nil {
		t.Fatal(err)
	}
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
