package fleetsim

import (
	"net/http"
	"strings"
)

// Variables.

func (s *Sim) listDeviceVariables(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.lookupDevice(p[0])
	if d == nil {
		errNotFound(w)
		return
	}
	base, floor := s.baseURL(r), s.floorMs()
	writeList(w, r, base, filterBy(d.vars, r.URL.Query(), variableFilters), defaultVarPageSize, func(v *variable) any { return s.renderVariable(base, v, floor) })
}

// getDeviceVariable addresses a variable under its device by ~label (the
// spec's form) or by id.
func (s *Sim) getDeviceVariable(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.lookupDevice(p[0])
	if d == nil {
		errNotFound(w)
		return
	}
	l, byLabel := strings.CutPrefix(p[1], "~")
	for _, v := range d.vars {
		if (byLabel && v.label == l) || (!byLabel && v.id == p[1]) {
			writeJSON(w, http.StatusOK, s.renderVariable(s.baseURL(r), v, s.floorMs()))
			return
		}
	}
	errNotFound(w)
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
	s.mu.RLock()
	defer s.mu.RUnlock()
	v := s.vars[p[0]]
	if v == nil {
		errNotFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.renderVariable(s.baseURL(r), v, s.floorMs()))
}
