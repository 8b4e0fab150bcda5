package fleetsim

import (
	"encoding/json"
	"time"
)

// SimPoint is one data point as tests see it.
type SimPoint struct {
	TimestampMs int64   `json:"timestamp"`
	Value       float64 `json:"value"`
	// Context is the point's context object; nil means {}.
	Context map[string]any `json:"context"`
}

// Device is a snapshot of a device for test oracles.
type Device struct {
	ID           string         `json:"id"`
	Label        string         `json:"label"`
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	Tags         []string       `json:"tags"`
	Properties   map[string]any `json:"properties"`
	Organization string         `json:"organization"` // owning organization's id
	CreatedAt    time.Time      `json:"created_at"`
	// LastActivityMs is the device's lastActivity under
	// Options.LastActivity: the greatest of its variables'; 0 when it is
	// null.
	LastActivityMs int64      `json:"last_activity_ms"`
	Variables      []Variable `json:"variables"`
}

// Variable is a snapshot of a variable for test oracles.
type Variable struct {
	ID         string         `json:"id"`
	Label      string         `json:"label"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"` // temperature, humidity, battery or position
	DeviceID   string         `json:"device_id"`
	Properties map[string]any `json:"properties"`
	CreatedAt  time.Time      `json:"created_at"`
	// LastActivityMs is the variable's lastActivity (POSIX ms) under
	// Options.LastActivity, as the API renders it; 0 when it is null. By
	// default it is when a point was last written: the newest generated
	// point's timestamp, or the time of the last AddPoints, live point or
	// writer point, even a late one.
	LastActivityMs int64 `json:"last_activity_ms"`
}

// Group is a snapshot of a device group.
type Group struct {
	ID           string    `json:"id"`
	Label        string    `json:"label"`
	Name         string    `json:"name"`
	Organization string    `json:"organization"` // organization id
	Tags         []string  `json:"tags"`
	Devices      []string  `json:"devices"` // member device ids
	CreatedAt    time.Time `json:"created_at"`
}

// Organization is a snapshot of an organization.
type Organization struct {
	ID         string      `json:"id"`
	Label      string      `json:"label"`
	Name       string      `json:"name"`
	CreatedAt  time.Time   `json:"created_at"`
	Dashboards []Dashboard `json:"dashboards"`
}

// Dashboard is a snapshot of a dashboard of an organization.
type Dashboard struct {
	ID        string    `json:"id"`
	Label     string    `json:"label"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Event is a snapshot of an event with its log history, newest log first.
type Event struct {
	ID              string    `json:"id"`
	Label           string    `json:"label"`
	Name            string    `json:"name"`
	CreatedAt       time.Time `json:"created_at"`
	LastTriggeredMs int64     `json:"last_triggered_ms"`
	// Exactly one of DeviceID and GroupID is set: the event watches
	// VariableLabel on that device or on every device of that group.
	DeviceID      string     `json:"device_id"`
	GroupID       string     `json:"group_id"`
	VariableLabel string     `json:"variable_label"`
	Logs          []EventLog `json:"logs"`
}

// EventLog is one entry of an event's log history.
type EventLog struct {
	ID         string    `json:"id"`
	CreatedAt  time.Time `json:"created_at"`
	Value      float64   `json:"value"`
	DeviceID   string    `json:"device_id"`
	VariableID string    `json:"variable_id"`
	Message    string    `json:"message"`
}

// Devices returns a snapshot of every device with its variables, in list order.
func (s *Sim) Devices() []Device {
	return snapshots(s, &s.devices, s.deviceSnapshot)
}

// snapshots copies every item of *list, in list order, with snap under the
// read lock: the list is read under it too, since writes replace it.
func snapshots[T, S any](s *Sim, list *[]T, snap func(T) S) []S {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]S, 0, len(*list))
	for _, x := range *list {
		out = append(out, snap(x))
	}
	return out
}

func (s *Sim) deviceSnapshot(d *device) Device {
	out := Device{
		ID: d.id, Label: d.label, Name: d.name, Description: d.description,
		Tags: append([]string(nil), d.tags...), Properties: cloneMap(d.properties),
		Organization: d.org.id, CreatedAt: d.createdAt,
	}
	for _, v := range d.vars {
		out.Variables = append(out.Variables, s.varSnapshot(v))
	}
	out.LastActivityMs, _ = s.deviceActivity(d)
	return out
}

func (s *Sim) varSnapshot(v *variable) Variable {
	la, _ := s.varActivity(v)
	return Variable{
		ID: v.id, Label: v.label, Name: v.name, Kind: v.kind.String(), DeviceID: v.dev.id,
		Properties: cloneMap(v.properties), CreatedAt: v.createdAt, LastActivityMs: la,
	}
}

// Points returns every point of the variable, including those outside the
// retention window, sorted by timestamp; nil when the variable is unknown.
func (s *Sim) Points(variableID string) []SimPoint {
	s.mu.RLock()
	v, ok := s.vars[variableID]
	var ser series
	if ok {
		ser = v.ser
	}
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	c := ser.cursor(minTs, maxTs)
	out := make([]SimPoint, 0, c.remaining())
	var buf []byte
	for c.next() {
		p := SimPoint{TimestampMs: c.ts, Value: c.value()}
		buf = c.appendContext(buf[:0])
		if len(buf) > 2 {
			_ = json.Unmarshal(buf, &p.Context)
		}
		out = append(out, p)
	}
	// The cursor runs newest first; oracles want ascending order.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// PointCount is the number of points the variable holds, including those
// outside the retention window; -1 when the variable is unknown.
func (s *Sim) PointCount(variableID string) int {
	return s.PointCountBetween(variableID, minTs, maxTs)
}

// PointCountBetween is the number of points of the variable with
// fromMs <= timestamp <= toMs, without materialising them (for oracles over
// big fleets); -1 when the variable is unknown.
func (s *Sim) PointCountBetween(variableID string, fromMs, toMs int64) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.vars[variableID]
	if !ok {
		return -1
	}
	c := v.ser.cursor(fromMs, toMs)
	return c.remaining()
}

// Groups returns a snapshot of every device group.
func (s *Sim) Groups() []Group {
	return snapshots(s, &s.groups, (*group).snapshot)
}

func (g *group) snapshot() Group {
	out := Group{ID: g.id, Label: g.label, Name: g.name, Organization: g.org.id, Tags: append([]string(nil), g.tags...), CreatedAt: g.createdAt}
	for _, d := range g.members {
		out.Devices = append(out.Devices, d.id)
	}
	return out
}

// Organizations returns a snapshot of every organization.
func (s *Sim) Organizations() []Organization {
	return snapshots(s, &s.orgs, (*org).snapshot)
}

func (o *org) snapshot() Organization {
	out := Organization{ID: o.id, Label: o.label, Name: o.name, CreatedAt: o.createdAt}
	for _, d := range o.dashboards {
		out.Dashboards = append(out.Dashboards, Dashboard{ID: d.id, Label: d.label, Name: d.name, CreatedAt: d.createdAt})
	}
	return out
}

// Events returns a snapshot of every event with its logs (newest first).
func (s *Sim) Events() []Event {
	return snapshots(s, &s.events, (*event).snapshot)
}

func (e *event) snapshot() Event {
	out := Event{ID: e.id, Label: e.label, Name: e.name, CreatedAt: e.createdAt, LastTriggeredMs: e.lastTriggered, VariableLabel: e.varLabel, Logs: append([]EventLog(nil), e.logs...)}
	if e.device != nil {
		out.DeviceID = e.device.id
	}
	if e.group != nil {
		out.GroupID = e.group.id
	}
	return out
}
