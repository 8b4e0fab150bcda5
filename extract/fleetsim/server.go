package fleetsim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// handlerFunc serves one method of one route. p holds the path parameters in
// order of appearance.
type handlerFunc func(s *Sim, w http.ResponseWriter, r *http.Request, p []string, tk TokenKind)

// route is one endpoint of the spec.
type route struct {
	// pattern names the endpoint in counters, e.g. "/api/v2.0/devices/{device_key}/".
	pattern string
	methods map[string]handlerFunc
	// queryToken allows ?token= in place of the header.
	queryToken bool
	// data marks Data API responses, which the cut fault may truncate.
	data bool
	// desc feeds the OPTIONS description.
	desc describe
}

// Routes. Path matching is by segments after the version prefix; a trailing
// slash is optional everywhere.
var (
	rOrgs          = &route{pattern: "/api/v2.0/organizations/", methods: map[string]handlerFunc{"GET": (*Sim).listOrgs}, desc: describe{"Organization List", orgFields}}
	rOrg           = &route{pattern: "/api/v2.0/organizations/{organization_key}/", methods: map[string]handlerFunc{"GET": (*Sim).getOrg}, desc: describe{"Organization Instance", orgFields}}
	rOrgDevices    = &route{pattern: "/api/v2.0/organizations/{organization_key}/devices/", methods: map[string]handlerFunc{"GET": (*Sim).listOrgDevices}, desc: describe{"Organization Device List", deviceFields}}
	rOrgDashboards = &route{pattern: "/api/v2.0/organizations/{organization_key}/dashboards/", methods: map[string]handlerFunc{"GET": (*Sim).listOrgDashboards}, desc: describe{"Organization Dashboard List", dashboardFields}}
	rGroups        = &route{pattern: "/api/v2.0/device_groups/", methods: map[string]handlerFunc{"GET": (*Sim).listGroups, "POST": (*Sim).createGroup}, desc: describe{"Device Group List", groupFields}}
	rGroup         = &route{pattern: "/api/v2.0/device_groups/{device_group_key}/", methods: map[string]handlerFunc{"GET": (*Sim).getGroup, "PATCH": (*Sim).patchGroup, "DELETE": (*Sim).deleteGroup}, desc: describe{"Device Group Instance", groupFields}}
	rGroupDevices  = &route{pattern: "/api/v2.0/device_groups/{device_group_key}/devices/", methods: map[string]handlerFunc{"GET": (*Sim).listGroupDevices}, desc: describe{"Device Group Device List", deviceFields}}
	rGroupAssign   = &route{pattern: "/api/v2.0/device_groups/{device_group_key}/_/assign_devices/", methods: map[string]handlerFunc{"POST": (*Sim).assignDevices}, desc: describe{"Device Group Assign Devices", memberFields}}
	rGroupRemove   = &route{pattern: "/api/v2.0/device_groups/{device_group_key}/_/remove_devices/", methods: map[string]handlerFunc{"POST": (*Sim).removeDevices}, desc: describe{"Device Group Remove Devices", memberFields}}
	rDevices       = &route{pattern: "/api/v2.0/devices/", methods: map[string]handlerFunc{"GET": (*Sim).listDevices}, desc: describe{"Device List", deviceFields}}
	rDevice        = &route{pattern: "/api/v2.0/devices/{device_key}/", methods: map[string]handlerFunc{"GET": (*Sim).getDevice, "PATCH": (*Sim).patchDevice}, desc: describe{"Device Instance", deviceFields}}
	rDeviceVars    = &route{pattern: "/api/v2.0/devices/{device_key}/variables/", methods: map[string]handlerFunc{"GET": (*Sim).listDeviceVariables}, desc: describe{"Device Variable List", variableFields}}
	rDeviceVar     = &route{pattern: "/api/v2.0/devices/{device_key}/variables/{variable_key}/", methods: map[string]handlerFunc{"GET": (*Sim).getDeviceVariable}, desc: describe{"Device Variable Instance", variableFields}}
	rVars          = &route{pattern: "/api/v2.0/variables/", methods: map[string]handlerFunc{"GET": (*Sim).listVariables}, desc: describe{"Variable List", variableFields}}
	rVar           = &route{pattern: "/api/v2.0/variables/{variable_id}/", methods: map[string]handlerFunc{"GET": (*Sim).getVariable}, desc: describe{"Variable Instance", variableFields}}
	rEventLogs     = &route{pattern: "/api/v2.0/events/{event_key}/logs/", methods: map[string]handlerFunc{"GET": (*Sim).listEventLogs}, desc: describe{"Event Log List", eventLogFields}}
	rValues        = &route{pattern: "/api/v1.6/variables/{variable_id}/values", methods: map[string]handlerFunc{"GET": (*Sim).getValues}, queryToken: true, data: true, desc: describe{"Values List", valueFields}}
	rStatistics    = &route{pattern: "/api/v1.6/variables/{variable_id}/statistics/{aggregation}/{start}/{end}", methods: map[string]handlerFunc{"GET": (*Sim).getStatistics}, data: true, desc: describe{"Variable Statistics", nil}}
	rAggregation   = &route{pattern: "/api/v1.6/data/stats/aggregation/", methods: map[string]handlerFunc{"POST": (*Sim).postAggregation}, queryToken: true, data: true, desc: describe{"Data Aggregation", aggregationFields}}
	rRawSeries     = &route{pattern: "/api/v1.6/data/raw/series", methods: map[string]handlerFunc{"POST": (*Sim).postRawSeries}, data: true, desc: describe{"Raw Series", rawSeriesFields}}
)

// match finds the route of an /api/ path and its parameters.
func match(path string) (*route, []string) {
	var rest string
	var platform bool
	switch {
	case strings.HasPrefix(path, "/api/v2.0/"):
		rest, platform = path[len("/api/v2.0/"):], true
	case strings.HasPrefix(path, "/api/v1.6/"):
		rest = path[len("/api/v1.6/"):]
	default:
		return nil, nil
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		return nil, nil
	}
	seg := strings.Split(rest, "/")
	for _, s := range seg {
		if s == "" {
			return nil, nil
		}
	}
	n := len(seg)
	if platform {
		switch seg[0] {
		case "organizations":
			switch {
			case n == 1:
				return rOrgs, nil
			case n == 2:
				return rOrg, seg[1:2]
			case n == 3 && seg[2] == "devices":
				return rOrgDevices, seg[1:2]
			case n == 3 && seg[2] == "dashboards":
				return rOrgDashboards, seg[1:2]
			}
		case "device_groups":
			switch {
			case n == 1:
				return rGroups, nil
			case n == 2:
				return rGroup, seg[1:2]
			case n == 3 && seg[2] == "devices":
				return rGroupDevices, seg[1:2]
			case n == 4 && seg[2] == "_" && seg[3] == "assign_devices":
				return rGroupAssign, seg[1:2]
			case n == 4 && seg[2] == "_" && seg[3] == "remove_devices":
				return rGroupRemove, seg[1:2]
			}
		case "devices":
			switch {
			case n == 1:
				return rDevices, nil
			case n == 2:
				return rDevice, seg[1:2]
			case n == 3 && seg[2] == "variables":
				return rDeviceVars, seg[1:2]
			case n == 4 && seg[2] == "variables":
				return rDeviceVar, []string{seg[1], seg[3]}
			}
		case "variables":
			switch n {
			case 1:
				return rVars, nil
			case 2:
				return rVar, seg[1:2]
			}
		case "events":
			if n == 3 && seg[2] == "logs" {
				return rEventLogs, seg[1:2]
			}
		}
		return nil, nil
	}
	switch {
	case n == 3 && seg[0] == "variables" && seg[2] == "values":
		return rValues, seg[1:2]
	case n == 6 && seg[0] == "variables" && seg[2] == "statistics":
		return rStatistics, []string{seg[1], seg[3], seg[4], seg[5]}
	case n == 3 && seg[0] == "data" && seg[1] == "stats" && seg[2] == "aggregation":
		return rAggregation, nil
	case n == 3 && seg[0] == "data" && seg[1] == "raw" && seg[2] == "series":
		return rRawSeries, nil
	}
	return nil, nil
}

// statusWriter records the status for the counters and passes Flush on.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// ServeHTTP serves the whole service: /api/v2.0, /api/v1.6 and the control
// interface under /_sim/.
func (s *Sim) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_sim/") || r.URL.Path == "/_sim" {
		s.serveControl(rw, r)
		return
	}
	rt, params := match(r.URL.Path)
	pattern := "unknown"
	if rt != nil {
		pattern = rt.pattern
	}
	sw := &statusWriter{ResponseWriter: rw}
	var w http.ResponseWriter = sw
	var cw *cutWriter
	defer func() {
		st := sw.status
		if st == 0 {
			st = http.StatusOK
		}
		s.count(r.Method + " " + pattern + " " + strconv.Itoa(st))
		if cw != nil {
			s.count("cut " + r.Method + " " + pattern)
		}
	}()

	if strings.HasPrefix(r.URL.Path, "/api/") {
		// The limits count a request when it arrives, before any latency.
		lv := s.admit(r, rt)
		fd := s.drawFaults(rt != nil && rt.data)
		info := s.inspect(r, fd.faults)
		if len(fd.faults.Variables) > 0 && !namesVariable(rt, params, info.body, fd.faults.Variables) {
			fd = faultDraw{}
		}
		if s.arrivedEarly(info) {
			s.count("early " + r.Method + " " + pattern)
		}
		var retryAt time.Time
		defer func() { s.noteAnswer(info, retryAt) }()
		if !sleepCtx(r, fd.latency) || !sleepCtx(r, fd.slow) {
			return
		}
		switch {
		case lv.status != 0:
			writeLimited(w, lv)
			return
		case fd.rateLimit:
			header, at, ok := retryAfterValue(fd.faults, s.now())
			if ok {
				retryAt = at
			}
			w.Header().Set("Retry-After", header)
			writeJSON(w, http.StatusTooManyRequests, detailBody{"Request was throttled. Expected available in " + header + " second."})
			return
		case fd.status != 0:
			msg := "A server error occurred."
			if fd.status == http.StatusServiceUnavailable {
				msg = "Service temporarily unavailable, try again later."
			}
			writeJSON(w, fd.status, detailBody{msg})
			return
		case fd.cutAt > 0:
			cw = &cutWriter{statusWriter: sw, cutAt: fd.cutAt}
			w = cw
		}
	}
	if rt == nil {
		errNotFound(w)
		return
	}
	tok := r.Header.Get("X-Auth-Token")
	if tok == "" && rt.queryToken {
		tok = r.URL.Query().Get("token")
	}
	tk, ok := s.authenticate(tok)
	if !ok {
		writeJSON(w, http.StatusUnauthorized, codeBody{401002, "Incorrect authentication credentials."})
		cw.finish()
		return
	}
	if r.Method == http.MethodOptions {
		s.describeRoute(w, r, rt)
		cw.finish()
		return
	}
	if s.rejectsPageSize(w, r) {
		cw.finish()
		return
	}
	h, ok := rt.methods[r.Method]
	if !ok {
		w.Header().Set("Allow", rt.allow())
		writeJSON(w, http.StatusMethodNotAllowed, codeDetailBody{405001, "Method not allowed.", "Method \"" + r.Method + "\" not allowed."})
		cw.finish()
		return
	}
	h(s, w, r, params, tk)
	cw.finish()
}

func (rt *route) allow() string {
	ms := []string{"OPTIONS"}
	for m := range rt.methods {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	return strings.Join(ms, ", ")
}

// sleepCtx waits d unless the client goes away first; it reports whether
// to go on.
func sleepCtx(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

type faultDraw struct {
	latency, slow time.Duration
	rateLimit     bool
	status        int
	cutAt         int
	// faults is the configuration the draw was made from.
	faults Faults
}

// drawFaults decides the faults of one request. It always draws the same
// number of random numbers so that a seed gives a reproducible sequence.
func (s *Sim) drawFaults(data bool) faultDraw {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	f := s.faults
	rnd := s.faultRand
	rSlow, rLimit, rErr, rWhich, rCut, rCutAt := rnd.Float64(), rnd.Float64(), rnd.Float64(), rnd.Float64(), rnd.Float64(), rnd.Intn(64<<10)
	d := faultDraw{latency: f.Latency, faults: f}
	if rSlow < f.SlowRate {
		d.slow = f.SlowHeaders
	}
	switch {
	case rLimit < f.RateLimitRate:
		d.rateLimit = true
	case rErr < f.ErrorRate:
		d.status = http.StatusInternalServerError
		if rWhich < 0.5 {
			d.status = http.StatusServiceUnavailable
		}
	case data && rCut < f.CutRate:
		d.cutAt = rCutAt + 1
	}
	return d
}

// cutWriter truncates a response body: it holds the body back until cutAt
// bytes are known, sends that much, and closes the connection. A body
// shorter than cutAt is cut in its middle when the handler returns.
type cutWriter struct {
	*statusWriter
	cutAt int
	held  []byte
}

func (w *cutWriter) Write(b []byte) (int, error) {
	w.held = append(w.held, b...)
	if len(w.held) >= w.cutAt {
		w.abort(w.cutAt)
	}
	return len(b), nil
}

// Flush is a no-op: the held bytes go out only when the cut happens.
func (w *cutWriter) Flush() {}

func (w *cutWriter) finish() {
	if w == nil {
		return
	}
	w.abort(len(w.held) / 2)
}

func (w *cutWriter) abort(n int) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	_, _ = w.statusWriter.Write(w.held[:n])
	w.statusWriter.Flush()
	// net/http closes the connection without finishing the body and
	// without logging a stack trace for this sentinel.
	panic(http.ErrAbortHandler)
}

// Error bodies: the four shapes of the spec.

func writeJSON(w http.ResponseWriter, status int, v any) {
	var bb bytes.Buffer
	enc := json.NewEncoder(&bb)
	enc.SetEscapeHTML(false) // URLs keep their '&' as the service prints them
	err := enc.Encode(v)
	b := bytes.TrimSuffix(bb.Bytes(), []byte("\n"))
	if err != nil {
		b = []byte(`{"detail":"A server error occurred."}`)
		status = http.StatusInternalServerError
	}
	b = unmarkNonFinite(b)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// nonFiniteMark starts the placeholder string that stands for NaN or an
// infinity in a value encoded by encoding/json, which cannot write them:
// writeJSON turns "<mark>NaN" back into the bare token NaN (and likewise
// Infinity, -Infinity), as Python's json module writes them.
const nonFiniteMark = "\x00fleetsim-non-finite:"

// markedJSON is how encoding/json spells the start of a placeholder.
var markedJSON = []byte(`"\u0000fleetsim-non-finite:`)

// jsonFloat is f for encoding/json: f when finite, else its placeholder.
func jsonFloat(f float64) any {
	if tok := nonFiniteToken(f); tok != "" {
		return nonFiniteMark + tok
	}
	return f
}

// unmarkNonFinite replaces every placeholder string in b by its bare token.
func unmarkNonFinite(b []byte) []byte {
	if !bytes.Contains(b, markedJSON) {
		return b
	}
	for _, tok := range []string{"NaN", "Infinity", "-Infinity"} {
		b = bytes.ReplaceAll(b, append(append([]byte(nil), markedJSON...), tok+`"`...), []byte(tok))
	}
	return b
}

// The error bodies as ordered structs, so keys come out in the spec's order.
type codeBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type codeDetailBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Detail  any    `json:"detail"`
}

type detailBody struct {
	Detail string `json:"detail"`
}

type schemaBody struct {
	Description string `json:"description"`
	Status      int    `json:"status"`
	Message     string `json:"message"`
}

func errNotFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, codeBody{404001, "The request was not found."})
}

func errDetail(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, status, detailBody{detail})
}

func errValidation(w http.ResponseWriter, detail any) {
	writeJSON(w, http.StatusBadRequest, codeDetailBody{400001, "Validation Error.", detail})
}

func errPermission(w http.ResponseWriter) {
	errDetail(w, http.StatusForbidden, "You do not have permission to perform this action.")
}

func errInvalidPage(w http.ResponseWriter) {
	errDetail(w, http.StatusNotFound, "Invalid page.")
}

func errJSONParse(w http.ResponseWriter, err error) {
	errDetail(w, http.StatusBadRequest, "JSON parse error - "+err.Error())
}

// errSchema answers a Data API query- or body-schema failure. The message
// embeds an internal schema name and a documentation URL, as the service's
// does, so that clients learn not to parse it.
func errSchema(w http.ResponseWriter, schema, problem string) {
	writeJSON(w, http.StatusBadRequest, schemaBody{
		Description: "Bad Request",
		Status:      400,
		Message:     "Validation failed for " + schema + ": " + problem + " See https://docs.fleet-telemetry.example/api/v1.6/schemas#" + strings.ToLower(schema),
	})
}

// errRetention answers a range that reaches past the retention window. In
// CSV the body is empty.
func errRetention(w http.ResponseWriter, csv bool) {
	if csv {
		w.Header().Set("Content-Type", "text/csv")
		w.WriteHeader(http.StatusForbidden)
		return
	}
	writeJSON(w, http.StatusForbidden, codeBody{403003, "The requested time range is older than your account's data retention limit of 24 months."})
}

// baseURL is the prefix of every absolute URL the simulator builds:
// Options.PublicURL when set, else the scheme and host the client used.
func (s *Sim) baseURL(r *http.Request) string {
	if s.publicURL != "" {
		return s.publicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// pageURL is the request's URL on base with its query changed by set; the
// token parameter is never echoed into URLs the simulator builds.
func pageURL(base string, r *http.Request, set func(q url.Values)) string {
	q := r.URL.Query()
	q.Del("token")
	set(q)
	u := base + r.URL.EscapedPath()
	if enc := q.Encode(); enc != "" {
		u += "?" + enc
	}
	return u
}
