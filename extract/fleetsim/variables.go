package fleetsim

import (
	"net/http"
	"strings"
)

// Variables.

func (s *Sim) listDeviceVariables(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	reading(s, w, func() *device { return s.lookupDevice(p[0]) }, func(d *device) {
		base, floor := s.baseURL(r), s.floorMs()
		writeList(w, r, base, filterBy(d.vars, r.URL.Query(), variableFilters), defaultVarPageSize, func(v *variable) any { return s.renderVariable(base, v, floor) })
	})
}

// getDeviceVariable addresses a variable under its device by ~label (the
// spec's form) or by id.
func (s *Sim) getDeviceVariable(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	reading(s, w, func() *variable {
		if d := s.lookupDevice(p[0]); d != nil {
			return findByKey(d.vars, p[1], func(v *variable) string { return v.id }, func(v *variable) string { return v.label })
		}
		return nil
	}, func(v *variable) {
		writeJSON(w, http.StatusOK, s.renderVariable(s.baseURL(r), v, s.floorMs()))
	})
}

func (s *Sim) allVariables() []*variable {
	var out []*variable
	for _, d := range s.devices {
		out = append(out, d.vars...)
	}
	return out
}

func (s *Sim) listVariables(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	base, floor := s.baseURL(r), s.floorMs()
	writeList(w, r, base, filterBy(s.allVariables(), r.URL.Query(), variableFilters), defaultVarPageSize, func(v *variable) any { return s.renderVariable(base, v, floor) })
}

func (s *Sim) getVariable(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	if strings.HasPrefix(p[0], "~") {
		errValidation(w, []string{"The label key (~label) is not allowed here: a variable label is unique only within its device; use /devices/{device_key}/variables/~{label}/ or the variable id."})
		return
	}
	reading(s, w, func() *variable { return s.vars[p[0]] }, func(v *variable) {
		writeJSON(w, http.StatusOK, s.renderVariable(s.baseURL(r), v, s.floorMs()))
	})
}
