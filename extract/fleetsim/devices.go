package fleetsim

import (
	"net/http"
)

// Devices.

func (s *Sim) listDevices(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	base := s.baseURL(r)
	writeList(w, r, base, filterBy(s.devices, r.URL.Query(), deviceFilters), defaultPageSize, func(d *device) any { return s.renderDevice(base, d) })
}

func (s *Sim) getDevice(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	reading(s, w, func() *device { return s.lookupDevice(p[0]) }, func(d *device) {
		writeJSON(w, http.StatusOK, s.renderDevice(s.baseURL(r), d))
	})
}

// patchDevice merges properties key by key and replaces tags; read-only
// fields (url, id, createdAt, lastActivity, variablesCount) and unknown
// fields are accepted and ignored.
func (s *Sim) patchDevice(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	obj, ok := readObject(w, r)
	if !ok {
		return
	}
	writing(s, w, func() *device { return s.lookupDevice(p[0]) }, func(d *device) {
		problems := map[string][]string{}
		label := labelFrom(obj, problems, "device", func(str string) bool { return s.devByLabel[str] != nil && s.devByLabel[str] != d })
		name := nameFrom(obj, problems)
		var desc *string
		var props map[string]any
		if v, ok := obj["description"]; ok {
			if str, isStr := v.(string); isStr {
				desc = &str
			} else {
				problems["description"] = []string{"Not a valid string."}
			}
		}
		if v, ok := obj["properties"]; ok {
			if m, isObj := v.(map[string]any); isObj {
				props = numberToAny(m).(map[string]any)
			} else {
				problems["properties"] = []string{"Expected a dictionary of items."}
			}
		}
		tags, setTags := tagsFrom(obj, problems)
		if len(problems) > 0 {
			errValidation(w, problems)
			return
		}
		if label != nil && *label != d.label {
			delete(s.devByLabel, d.label)
			d.label = *label
			s.devByLabel[d.label] = d
		}
		if name != nil {
			d.name = *name
		}
		if desc != nil {
			d.description = *desc
		}
		if props != nil {
			merged := make(map[string]any, len(d.properties)+len(props))
			for k, v := range d.properties {
				merged[k] = v
			}
			for k, v := range props {
				merged[k] = v
			}
			d.properties = merged
		}
		if setTags {
			d.tags = tags
		}
		writeJSON(w, http.StatusOK, s.renderDevice(s.baseURL(r), d))
	})
}
