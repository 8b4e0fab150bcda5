package pipeline_test

// The simulation's metadata: the real Refresh, handed each cycle's walk
// page by page as the walk lists it (with pages dropped, listed twice and
// walks that fail or start over part way), writing to a model of the
// devices and variables tables. After the last quiet cycle every variable
// of the source must be stored live with its device, and every deleted one
// stored must be marked deleted.

import (
	"context"
	"fmt"
	"sort"
	"time"

	. "github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
)

// simMetaRow is a stored row of the model's devices or variables table.
type simMetaRow struct {
	device, label string
	deleted       bool
}

// simMeta is the model's metadata tables. Caller holds w.mu.
type simMeta struct {
	devices, vars map[string]simMetaRow
}

func (w *simWorld) metaTables() *simMeta {
	if w.meta == nil {
		w.meta = &simMeta{devices: map[string]simMetaRow{}, vars: map[string]simMetaRow{}}
	}
	return w.meta
}

// simRefresh is the service's side of the refresh: devices are those with
// a live variable; there are no groups or organizations.
type simRefresh struct{ p *simProc }

func (s simRefresh) Devices(ctx context.Context, fn func(Device) error) error {
	w := s.p.w
	w.sched.call("list devices")
	w.mu.Lock()
	var ids []string
	seen := map[string]bool{}
	for _, v := range w.vars {
		if !v.deleted && !seen[v.device] {
			seen[v.device] = true
			ids = append(ids, v.device)
		}
	}
	w.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		if err := fn(Device{ID: id, Label: "dev-" + id}); err != nil {
			return err
		}
	}
	return nil
}

func (simRefresh) ListDeviceGroups(context.Context, func(metadata.DeviceGroup) error) error {
	return nil
}

func (simRefresh) ListOrganizations(context.Context, func(metadata.Organization) error) error {
	return nil
}

func (simRefresh) GroupDeviceIDs(context.Context, string) ([]string, error)        { return nil, nil }
func (simRefresh) OrganizationDeviceIDs(context.Context, string) ([]string, error) { return nil, nil }

// simMetaStore is the warehouse's side of the refresh over the model's
// tables, comparing as load/clickhouse does: with the live rows as they
// were when the walk began, or as the walk's own writes left them.
type simMetaStore struct{ p *simProc }

func (s simMetaStore) WriteDevices(_ context.Context, ds []Device, _ time.Time) error {
	w := s.p.w
	w.sched.call(fmt.Sprintf("write %d devices", len(ds)))
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range ds {
		w.metaTables().devices[d.ID] = simMetaRow{label: d.Label}
	}
	return nil
}

func (s simMetaStore) WriteVariables(_ context.Context, vs []Variable, _ time.Time) error {
	w := s.p.w
	w.sched.call(fmt.Sprintf("write %d variables", len(vs)))
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range vs {
		w.metaTables().vars[v.ID] = simMetaRow{device: v.DeviceID, label: v.Label}
	}
	return nil
}

func (s simMetaStore) LiveDevices(context.Context) (map[string]string, error) {
	w := s.p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for id, r := range w.metaTables().devices {
		if !r.deleted {
			out[id] = ""
		}
	}
	return out, nil
}

func (s simMetaStore) WriteChangedDevices(ctx context.Context, ds []Device, at time.Time) (metadata.Diff, error) {
	return metadata.Diff{Written: len(ds)}, s.WriteDevices(ctx, ds, at)
}

func (s simMetaStore) ChangedVariables(context.Context, time.Time) (metadata.VariableChanges, error) {
	w := s.p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &simChanges{s: s, live: map[string]simMetaRow{}, seen: map[string]bool{}}
	for id, r := range w.metaTables().vars {
		if !r.deleted {
			c.live[id] = r
		}
	}
	return c, nil
}

func (s simMetaStore) mark(table func(*simMeta) map[string]simMetaRow, ids []string) {
	w := s.p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	t := table(w.metaTables())
	for _, id := range ids {
		r := t[id]
		r.deleted = true
		t[id] = r
	}
}

func (s simMetaStore) MarkDevicesDeleted(_ context.Context, ids []string) error {
	s.mark(func(m *simMeta) map[string]simMetaRow { return m.devices }, ids)
	return nil
}

func (s simMetaStore) MarkVariablesDeleted(_ context.Context, ids []string) error {
	s.mark(func(m *simMeta) map[string]simMetaRow { return m.vars }, ids)
	return nil
}

func (simMetaStore) WriteOrganizations(context.Context, []metadata.Organization, time.Time) error {
	return nil
}
func (simMetaStore) WriteDeviceGroups(context.Context, []metadata.DeviceGroup, time.Time) error {
	return nil
}

// simChanges is one walk's VariableChanges.
type simChanges struct {
	s    simMetaStore
	live map[string]simMetaRow
	seen map[string]bool
}

func (c *simChanges) Write(ctx context.Context, vs []Variable) (int, error) {
	var changed []Variable
	for _, v := range vs {
		c.seen[v.ID] = true
		row := simMetaRow{device: v.DeviceID, label: v.Label}
		if old, ok := c.live[v.ID]; ok && old == row {
			continue
		}
		c.live[v.ID] = row
		changed = append(changed, v)
	}
	return len(changed), c.s.WriteVariables(ctx, changed, time.Time{})
}

func (c *simChanges) Missing(context.Context) ([]metadata.StoredRef, error) {
	var out []metadata.StoredRef
	for id, r := range c.live {
		if !c.seen[id] {
			out = append(out, metadata.StoredRef{ID: id, DeviceID: r.device})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// checkMetadata compares the model's metadata tables with the source.
// Caller holds w.mu.
func (w *simWorld) checkMetadata(when string) {
	m := w.metaTables()
	// An account listed empty is taken for a source answering oddly, and
	// nothing is marked deleted on it (Refresh.markDeleted).
	empty := true
	for _, v := range w.vars {
		empty = empty && v.deleted
	}
	for _, v := range w.vars {
		r, ok := m.vars[v.id]
		switch {
		case v.deleted && ok && !r.deleted && !empty:
			w.violate("%s, variable %s was deleted in the source and is stored live", when, v.id)
		case !v.deleted && (!ok || r.deleted):
			w.violate("%s, variable %s of the source is stored %v (stored: %v)", when, v.id, map[bool]string{true: "deleted", false: "nowhere"}[ok], ok)
		case !v.deleted && (r.device != v.device || r.label != "l"+v.id):
			w.violate("%s, variable %s is stored as %+v", when, v.id, r)
		case !v.deleted:
			if d, ok := m.devices[v.device]; !ok || d.deleted {
				w.violate("%s, device %s of live variable %s is not stored live", when, v.device, v.id)
			}
		}
	}
}
