package fleetsim

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Lookups by key (caller holds s.mu).

func (s *Sim) lookupDevice(key string) *device {
	if l, ok := strings.CutPrefix(key, "~"); ok {
		return s.devByLabel[l]
	}
	return s.devByID[key]
}

func (s *Sim) lookupOrg(key string) *org {
	return findByKey(s.orgs, key, func(o *org) string { return o.id }, func(o *org) string { return o.label })
}

func (s *Sim) lookupGroup(key string) *group {
	return findByKey(s.groups, key, func(g *group) string { return g.id }, func(g *group) string { return g.label })
}

func (s *Sim) lookupEvent(key string) *event {
	return findByKey(s.events, key, func(e *event) string { return e.id }, func(e *event) string { return e.label })
}

// Representations.

// refJSON is how every named resource's representation starts, and all a
// variable shows of its device. Embedded without a tag, encoding/json puts
// its fields where it stands, so the representations keep their order.
type refJSON struct {
	URL   string `json:"url"`
	ID    string `json:"id"`
	Label string `json:"label"`
	Name  string `json:"name"`
}

// ref is the refJSON of the resource id under /api/v2.0/collection/.
func ref(base, collection, id, label, name string) refJSON {
	return refJSON{URL: base + "/api/v2.0/" + collection + "/" + id + "/", ID: id, Label: label, Name: name}
}

// summaryJSON is a resource rendered in brief: an organization, or a
// device in a group's member list.
type summaryJSON struct {
	refJSON
	CreatedAt string `json:"createdAt"`
}

func renderOrg(base string, o *org) any {
	return summaryJSON{ref(base, "organizations", o.id, o.label, o.name), isoTime(o.createdAt)}
}

type deviceJSON struct {
	refJSON
	Description    string         `json:"description"`
	Properties     map[string]any `json:"properties"`
	Tags           []string       `json:"tags"`
	CreatedAt      string         `json:"createdAt"`
	LastActivity   any            `json:"lastActivity"`
	VariablesCount int            `json:"variablesCount"`
}

func (s *Sim) renderDevice(base string, d *device) any {
	tags := d.tags
	if tags == nil {
		tags = []string{}
	}
	props := d.properties
	if props == nil {
		props = map[string]any{}
	}
	return deviceJSON{
		refJSON: ref(base, "devices", d.id, d.label, d.name), Description: d.description,
		Properties: props, Tags: tags, CreatedAt: isoTime(d.createdAt), LastActivity: activityJSON(s.deviceActivity(d)), VariablesCount: len(d.vars),
	}
}

func renderDeviceSummary(base string, d *device) any {
	return summaryJSON{ref(base, "devices", d.id, d.label, d.name), isoTime(d.createdAt)}
}

type variableJSON struct {
	refJSON
	Description  string          `json:"description"`
	Properties   map[string]any  `json:"properties"`
	Device       refJSON         `json:"device"`
	CreatedAt    string          `json:"createdAt"`
	LastActivity any             `json:"lastActivity"`
	LastValue    json.RawMessage `json:"lastValue"`
}

// renderVariable includes lastValue: the newest retained point, {} if none.
func (s *Sim) renderVariable(base string, v *variable, floor int64) any {
	lv := []byte("{}")
	c := v.ser.cursor(floor, maxTs)
	if c.next() {
		lv = appendPointJSON(nil, &c, -1)
		if tok := nonFiniteToken(c.value()); tok != "" {
			// json.RawMessage must be strict JSON: a placeholder
			// stands in for the token until writeJSON.
			lv = bytes.Replace(lv, []byte(`"value":`+tok+`,`), append(appendJSONString([]byte(`"value":`), nonFiniteMark+tok), ','), 1)
		}
	}
	props := v.properties
	if props == nil {
		props = map[string]any{}
	}
	return variableJSON{
		refJSON: ref(base, "variables", v.id, v.label, v.name), Description: "",
		Properties: props,
		Device:     ref(base, "devices", v.dev.id, v.dev.label, v.dev.name),
		CreatedAt:  isoTime(v.createdAt), LastActivity: activityJSON(s.varActivity(v)), LastValue: lv,
	}
}

type groupJSON struct {
	refJSON
	Organization string   `json:"organization"`
	Tags         []string `json:"tags"`
	Devices      []string `json:"devices"`
	CreatedAt    string   `json:"createdAt"`
}

func renderGroup(base string, g *group) any {
	ids := make([]string, 0, len(g.members))
	for _, d := range g.members {
		ids = append(ids, d.id)
	}
	tags := g.tags
	if tags == nil {
		tags = []string{}
	}
	return groupJSON{refJSON: ref(base, "device_groups", g.id, g.label, g.name), Organization: g.org.id, Tags: tags, Devices: ids, CreatedAt: isoTime(g.createdAt)}
}
