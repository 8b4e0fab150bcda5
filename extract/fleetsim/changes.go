package fleetsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// AddPoints adds points to a variable: new points, late points behind its
// newest, or replacements of points at existing timestamps (one point per
// timestamp). Every point is written at Now(): that is its created_at, and
// under LastActivityAnyWrite the variable's lastActivity becomes Now(), even
// for late points. Values may be NaN or infinite; the JSON outputs render
// them as NaN, Infinity and -Infinity.
func (s *Sim) AddPoints(variableID string, pts []SimPoint) error {
	return s.AddPointsMany(map[string][]SimPoint{variableID: pts})
}

// AddPointsMany adds points to several variables at once, as AddPoints
// does to each, under one lock and at one Now(): a writer of a large fleet
// adds a second's points in one call. Every id is checked before any point
// is written: an unknown one (ErrNotFound) writes nothing.
func (s *Sim) AddPointsMany(pts map[string][]SimPoint) error {
	now := s.now().UnixMilli()
	enc := make(map[string][]overlayPoint, len(pts))
	for id, ps := range pts {
		if len(ps) == 0 {
			continue
		}
		ops := make([]overlayPoint, 0, len(ps))
		for _, p := range ps {
			op := overlayPoint{ts: p.TimestampMs, value: p.Value, created: now}
			if len(p.Context) > 0 {
				b, err := json.Marshal(p.Context)
				if err != nil {
					return fmt.Errorf("add points to %s: context of point %d: %w", id, p.TimestampMs, err)
				}
				op.ctx = b
			}
			ops = append(ops, op)
		}
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].ts < ops[j].ts })
		enc[id] = ops
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range enc {
		if _, ok := s.vars[id]; !ok {
			return fmt.Errorf("add points: %w: variable %s", ErrNotFound, id)
		}
	}
	for id, ops := range enc {
		v := s.vars[id]
		for _, op := range ops {
			v.ser.insert(op)
		}
		v.noteWrite(now)
	}
	return nil
}

// DeleteVariable removes a variable and its data from its device and from
// every list; ErrNotFound when the id is unknown.
func (s *Sim) DeleteVariable(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[id]
	if !ok {
		return fmt.Errorf("delete variable %q: %w", id, ErrNotFound)
	}
	delete(s.vars, id)
	d := v.dev
	out := make([]*variable, 0, len(d.vars))
	for _, x := range d.vars {
		if x != v {
			out = append(out, x)
		}
	}
	d.vars = out
	return nil
}

// ErrNotFound is returned by the control methods for an unknown object.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a label is already taken.
var ErrConflict = errors.New("label already taken")

// DeleteDevice removes a device (by id or ~label) with its variables and
// data, and takes it out of every group.
func (s *Sim) DeleteDevice(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.lookupDevice(key)
	if d == nil {
		return fmt.Errorf("delete device %q: %w", key, ErrNotFound)
	}
	delete(s.devByID, d.id)
	delete(s.devByLabel, d.label)
	for _, v := range d.vars {
		delete(s.vars, v.id)
	}
	s.devices = removeDevice(s.devices, d)
	d.org.devices = removeDevice(d.org.devices, d)
	for _, g := range s.groups {
		g.members = removeDevice(g.members, d)
	}
	return nil
}

func removeDevice(list []*device, d *device) []*device {
	out := list[:0:0]
	for _, x := range list {
		if x != d {
			out = append(out, x)
		}
	}
	return out
}

// AddDevice creates a device in the first organization with the given
// number of empty variables (kinds cycling as in the generated fleet).
func (s *Sim) AddDevice(label string, variables int) (Device, error) {
	if label == "" || strings.ContainsAny(label, "/") || strings.HasPrefix(label, "~") {
		return Device{}, fmt.Errorf("add device: label %q must be non-empty, without '/' and not start with '~'", label)
	}
	if variables < 0 {
		return Device{}, fmt.Errorf("add device %q: negative variable count %d", label, variables)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.devByLabel[label]; ok {
		return Device{}, fmt.Errorf("add device %q: %w", label, ErrConflict)
	}
	if len(s.orgs) == 0 {
		return Device{}, errors.New("add device: no organization")
	}
	now := s.now().UTC()
	d := &device{
		id: s.newID(), label: label, name: label, org: s.orgs[0],
		properties: map[string]any{}, tags: []string{}, createdAt: now,
	}
	for j := 0; j < variables; j++ {
		k := kind(j % int(numKinds))
		v := &variable{
			id: s.newID(), label: varLabel(k, j), name: k.title(), kind: k, dev: d,
			properties: map[string]any{"_color": k.color()}, createdAt: now,
		}
		d.vars = append(d.vars, v)
		s.vars[v.id] = v
	}
	s.devices = append(s.devices, d)
	s.devByID[d.id] = d
	s.devByLabel[d.label] = d
	d.org.devices = append(d.org.devices, d)
	return s.deviceSnapshot(d), nil
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
