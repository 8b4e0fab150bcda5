package fleetsim

import (
	"net/http"
)

// Organizations.

func (s *Sim) listOrgs(w http.ResponseWriter, r *http.Request, _ []string, tk TokenKind) {
	if tk == TokenOrdinary {
		errPermission(w)
		return
	}
	s.mu.RLock()
	orgs := append([]*org(nil), s.orgs...)
	s.mu.RUnlock()
	base := s.baseURL(r)
	writeList(w, r, base, orgs, defaultPageSize, func(o *org) any { return renderOrg(base, o) })
}

func (s *Sim) getOrg(w http.ResponseWriter, r *http.Request, p []string, tk TokenKind) {
	// The permission check comes before the lookup: an ordinary token gets
	// 403 for any organization key.
	if tk == TokenOrdinary {
		errPermission(w)
		return
	}
	s.mu.RLock()
	o := s.lookupOrg(p[0])
	var body any
	if o != nil {
		body = renderOrg(s.baseURL(r), o)
	}
	s.mu.RUnlock()
	if o == nil {
		errNotFound(w)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Sim) listOrgDevices(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	reading(s, w, func() *org { return s.lookupOrg(p[0]) }, func(o *org) {
		base := s.baseURL(r)
		writeList(w, r, base, filterBy(o.devices, r.URL.Query(), deviceFilters), defaultPageSize, func(d *device) any { return s.renderDevice(base, d) })
	})
}

type dashboardJSON struct {
	refJSON
	Organization string `json:"organization"`
	CreatedAt    string `json:"createdAt"`
}

func (s *Sim) listOrgDashboards(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	reading(s, w, func() *org { return s.lookupOrg(p[0]) }, func(o *org) {
		base := s.baseURL(r)
		writeList(w, r, base, o.dashboards, defaultPageSize, func(d *dashboard) any {
			return dashboardJSON{refJSON: ref(base, "dashboards", d.id, d.label, d.name), Organization: o.id, CreatedAt: isoTime(d.createdAt)}
		})
	})
}
