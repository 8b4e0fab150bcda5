package fleetsim

import (
	"fmt"
	"net/http"
	"strings"
)

// Device groups.

func (s *Sim) listGroups(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	base := s.baseURL(r)
	writeList(w, r, base, filterBy(s.groups, r.URL.Query(), groupFilters), defaultPageSize, func(g *group) any { return renderGroup(base, g) })
}

func (s *Sim) getGroup(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	reading(s, w, func() *group { return s.lookupGroup(p[0]) }, func(g *group) {
		writeJSON(w, http.StatusOK, renderGroup(s.baseURL(r), g))
	})
}

// groupFieldsFrom validates the writable group fields of a create or patch.
func (s *Sim) groupFieldsFrom(obj map[string]any, self *group, create bool) (label, name *string, o *org, tags []string, setTags bool, problems map[string][]string) {
	problems = map[string][]string{}
	label = labelFrom(obj, problems, "device group", func(str string) bool {
		g := s.lookupGroup("~" + str)
		return g != nil && g != self
	})
	if _, ok := obj["label"]; !ok && create {
		problems["label"] = []string{"This field is required."}
	}
	name = nameFrom(obj, problems)
	if create {
		if v, ok := obj["organization"]; !ok {
			problems["organization"] = []string{"This field is required."}
		} else if str, isStr := v.(string); !isStr {
			problems["organization"] = []string{"Not a valid string."}
		} else if o = s.lookupOrg(str); o == nil {
			problems["organization"] = []string{fmt.Sprintf("Invalid organization %q - object does not exist.", str)}
		}
	}
	tags, setTags = tagsFrom(obj, problems)
	return
}

func (s *Sim) createGroup(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	obj, ok := readObject(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	label, name, o, tags, _, problems := s.groupFieldsFrom(obj, nil, true)
	if len(problems) > 0 {
		errValidation(w, problems)
		return
	}
	g := &group{id: s.newID(), label: *label, name: *label, org: o, tags: tags, createdAt: s.now().UTC()}
	if name != nil {
		g.name = *name
	}
	if g.tags == nil {
		g.tags = []string{}
	}
	// devices, if sent, is read-only: a new group starts empty.
	s.groups = append(s.groups, g)
	writeJSON(w, http.StatusCreated, renderGroup(s.baseURL(r), g))
}

// patchGroup updates label, name and tags; devices, organization and the
// other read-only fields are ignored.
func (s *Sim) patchGroup(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	obj, ok := readObject(w, r)
	if !ok {
		return
	}
	writing(s, w, func() *group { return s.lookupGroup(p[0]) }, func(g *group) {
		label, name, _, tags, setTags, problems := s.groupFieldsFrom(obj, g, false)
		if len(problems) > 0 {
			errValidation(w, problems)
			return
		}
		if label != nil {
			g.label = *label
		}
		if name != nil {
			g.name = *name
		}
		if setTags {
			g.tags = tags
		}
		writeJSON(w, http.StatusOK, renderGroup(s.baseURL(r), g))
	})
}

func (s *Sim) deleteGroup(w http.ResponseWriter, _ *http.Request, p []string, _ TokenKind) {
	writing(s, w, func() *group { return s.lookupGroup(p[0]) }, func(g *group) {
		out := s.groups[:0:0]
		for _, x := range s.groups {
			if x != g {
				out = append(out, x)
			}
		}
		s.groups = out
		w.WriteHeader(http.StatusNoContent)
	})
}

func (s *Sim) listGroupDevices(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	reading(s, w, func() *group { return s.lookupGroup(p[0]) }, func(g *group) {
		base := s.baseURL(r)
		writeList(w, r, base, filterBy(g.members, r.URL.Query(), deviceFilters), defaultPageSize, func(d *device) any { return s.renderDevice(base, d) })
	})
}

// memberBody reads the identifier array of assign_devices and
// remove_devices: device id strings, "~label" strings and {id: ...}
// objects, mixed. It answers errors itself.
func (s *Sim) memberBody(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return nil, false
	}
	arr, ok := body.([]any)
	if !ok {
		errValidation(w, fmt.Sprintf("Expected a list of device identifiers, but got %s.", jsonTypeName(body)))
		return nil, false
	}
	keys := make([]string, 0, len(arr))
	var problems []string
	for i, e := range arr {
		switch x := e.(type) {
		case string:
			keys = append(keys, x)
		case map[string]any:
			if id, ok := x["id"].(string); ok {
				keys = append(keys, id)
				continue
			}
			problems = append(problems, fmt.Sprintf("Item %d: an object must carry the device id as a string in \"id\".", i))
		default:
			problems = append(problems, fmt.Sprintf("Item %d: expected a device id, a ~label or an object {id}.", i))
		}
	}
	if len(problems) > 0 {
		errValidation(w, problems)
		return nil, false
	}
	return keys, true
}

// resolveDevices looks every key up; unknown keys are a 400001 naming them.
// Caller holds s.mu.
func (s *Sim) resolveDevices(w http.ResponseWriter, keys []string) ([]*device, bool) {
	var out []*device
	var problems []string
	for _, k := range keys {
		d := s.lookupDevice(k)
		if d == nil {
			problems = append(problems, fmt.Sprintf("Device %q does not exist.", k))
			continue
		}
		out = append(out, d)
	}
	if len(problems) > 0 {
		errValidation(w, problems)
		return nil, false
	}
	return out, true
}

func queryBool(v string) bool {
	switch strings.ToLower(v) {
	case "true", "1", "yes", "on":
		return true
	}
	return false
}

// editMembers reads the device list of an assign or remove body, then,
// under the write lock, finds the group and the devices and calls edit.
func (s *Sim) editMembers(w http.ResponseWriter, r *http.Request, p []string, edit func(g *group, devs []*device)) {
	keys, ok := s.memberBody(w, r)
	if !ok {
		return
	}
	writing(s, w, func() *group { return s.lookupGroup(p[0]) }, func(g *group) {
		if devs, ok := s.resolveDevices(w, keys); ok {
			edit(g, devs)
		}
	})
}

func (s *Sim) assignDevices(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.editMembers(w, r, p, func(g *group, devs []*device) { s.assign(w, r, g, devs) })
}

// assign makes devs members of g (its only members with ?clear=true).
func (s *Sim) assign(w http.ResponseWriter, r *http.Request, g *group, devs []*device) {
	var members []*device
	if !queryBool(r.URL.Query().Get("clear")) {
		members = append(members, g.members...)
	}
	for _, d := range devs {
		dup := false
		for _, m := range members {
			dup = dup || m == d
		}
		if !dup {
			members = append(members, d)
		}
	}
	g.members = members
	base := s.baseURL(r)
	writeList(w, r, base, g.members, defaultPageSize, func(d *device) any { return renderDeviceSummary(base, d) })
}

func (s *Sim) removeDevices(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.editMembers(w, r, p, func(g *group, devs []*device) {
		for _, d := range devs {
			g.members = removeDevice(g.members, d)
		}
		writeJSON(w, http.StatusOK, listBody{Results: []any{}})
	})
}
