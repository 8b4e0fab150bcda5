package fleetsim

import (
	"net/http"
	"net/url"
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
	// Every page of the account-wide list builds this: sized once, as a
	// fleet of 10^6 variables would otherwise regrow it 40 times a page.
	n := 0
	for _, d := range s.devices {
		n += len(d.vars)
	}
	out := make([]*variable, 0, n)
	for _, d := range s.devices {
		out = append(out, d.vars...)
	}
	return out
}

func (s *Sim) listVariables(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	base, floor := s.baseURL(r), s.floorMs()
	render := func(v *variable) any { return s.renderVariable(base, v, floor) }
	q := r.URL.Query()
	if !filtersAny(q, variableFilters) {
		// The page is taken from the devices' lists as they stand, the
		// same items allVariables would give it, without building the
		// whole account's list for every page: a walk of 10^6 variables
		// would cost the simulator 10^9 steps.
		total := 0
		for _, d := range s.devices {
			total += len(d.vars)
		}
		p, ok := paginate(w, r, base, total, defaultVarPageSize)
		if !ok {
			return
		}
		res := make([]any, 0, p.hi-p.lo)
		at := 0
		for _, d := range s.devices {
			if at >= p.hi {
				break
			}
			if n := len(d.vars); at+n > p.lo {
				for _, v := range d.vars[max(p.lo-at, 0):min(p.hi-at, n)] {
					res = append(res, render(v))
				}
			}
			at += len(d.vars)
		}
		writeJSON(w, http.StatusOK, listBody{Count: total, Next: p.next, Previous: p.prev, Results: res})
		return
	}
	writeList(w, r, base, filterBy(s.allVariables(), q, variableFilters), defaultVarPageSize, render)
}

// filtersAny reports whether q has a non-empty parameter that names one of
// fields (with or without an operator), i.e. whether filterBy could drop
// an item.
func filtersAny[T any](q url.Values, fields map[string]func(T) []string) bool {
	for key, vals := range q {
		name, _, _ := strings.Cut(key, "__")
		if _, ok := fields[name]; ok && len(vals) > 0 && vals[0] != "" {
			return true
		}
	}
	return false
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
