package metadata

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// fakeFleet is a RefreshSource and an EventSource in memory. Event logs
// are served in the order of logs[event], pageSize per page; pages counts
// the pages served.
type fakeFleet struct {
	mu      sync.Mutex
	devices []pipeline.Device
	vars    map[string][]pipeline.Variable
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

func (f *fakeFleet) Devices(_ context.Context, fn func(pipeline.Device) error) error {
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

// fakeFleetStore is a RefreshStore, an EventLogWriter and an
// EventMarkStore in memory.
type fakeFleetStore struct {
	mu           sync.Mutex
	devices      map[string]pipeline.Device
	deletedDevs  map[string]bool
	vars         map[string]pipeline.Variable
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
	return &fakeFleetStore{devices: map[string]pipeline.Device{}, deletedDevs: map[string]bool{}, vars: map[string]pipeline.Variable{},
		deletedVars: map[string]bool{}, marks: map[string]EventMark{}, logs: map[string]map[string]EventLog{}}
}

func (s *fakeFleetStore) WriteDevices(_ context.Context, ds []pipeline.Device, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devicesWrite++
	for _, d := range ds {
		s.devices[d.ID] = d
		delete(s.deletedDevs, d.ID)
	}
	return nil
}

func (s *fakeFleetStore) WriteVariables(_ context.Context, vs []pipeline.Variable, _ time.Time) error {
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
func (s *fakeFleetStore) WriteChangedDevices(ctx context.Context, ds []pipeline.Device, at time.Time) (Diff, error) {
	s.mu.Lock()
	var diff Diff
	var changed []pipeline.Device
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
	c := &fakeChanges{s: s, at: at, live: map[string]pipeline.Variable{}, seen: map[string]bool{}}
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
	live map[string]pipeline.Variable
	seen map[string]bool
}

func (c *fakeChanges) Write(ctx context.Context, vs []pipeline.Variable) (int, error) {
	var changed []pipeline.Variable
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
	s.markDeleted(s.deletedDevs, ids)
	return nil
}

func (s *fakeFleetStore) MarkVariablesDeleted(_ context.Context, ids []string) error {
	s.markDeleted(s.deletedVars, ids)
	return nil
}

// markDeleted flags ids in deleted, the store's set of a table's rows
// marked deleted.
func (s *fakeFleetStore) markDeleted(deleted map[string]bool, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		deleted[id] = true
	}
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
	return maps.Clone(s.marks), nil
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
	return &fakeFleet{vars: map[string][]pipeline.Variable{}, orgDevices: map[string][]string{}, logs: map[string][]EventLog{}, pageSize: 3, pages: map[string]int{}, lists: map[string]int{}}
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

func fleetFixture() (*fakeFleet, *fakeFleetStore) {
	src, store := newFakeFleet(), newFakeFleetStore()
	for _, id := range []string{"A", "B", "C"} {
		src.devices = append(src.devices, pipeline.Device{ID: id, Label: "dev-" + id})
		src.vars[id] = []pipeline.Variable{{ID: id + "1", DeviceID: id}, {ID: id + "2", DeviceID: id}}
	}
	src.groups = []DeviceGroup{{ID: "g1", Organization: "o1", Members: []string{"A", "B"}}}
	src.orgDevices = map[string][]string{"o1": {"A", "B", "C"}}
	src.orgsErr = permissionErr{}
	return src, store
}

// refreshedFixture is fleetFixture with a Refresh that has stored a
// first walk of every device, the start of a test of the walks after it.
func refreshedFixture(t *testing.T) (*fakeFleet, *fakeFleetStore, *Refresh) {
	t.Helper()
	src, store := fleetFixture()
	f := NewRefresh(src, store, RefreshOptions{}, nil)
	if err := WriteSnapshot(context.Background(), f, snapshotOf(src, "A", "B", "C")); err != nil {
		t.Fatal(err)
	}
	return src, store, f
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

// Snapshot is a whole walk of the in-scope fleet, for WriteSnapshot.
type Snapshot struct {
	Devices   []pipeline.Device
	Variables []pipeline.Variable
	// Scoped says the walk was restricted by a scope, so a device missing
	// from it may merely be out of scope rather than deleted.
	Scoped bool
	At     time.Time
}

// WriteSnapshot stores a whole walk through w as a cycle hands it on
// (pipeline/sync.go, cycleWalk), but in one page: the tests hold the walk
// anyway.
func WriteSnapshot(ctx context.Context, w pipeline.SnapshotWriter, snap Snapshot) error {
	run, err := w.BeginSnapshot(ctx, snap.Scoped, snap.At)
	if err != nil {
		return err
	}
	if err := run.Devices(ctx, snap.Devices); err != nil {
		return err
	}
	if err := run.Variables(ctx, snap.Variables); err != nil {
		return err
	}
	return run.Finish(ctx)
}
