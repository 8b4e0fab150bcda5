package fleetsim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const (
	defaultPageSize    = 50
	defaultVarPageSize = 200
	// maxPageSize bounds page_size on Platform API lists (not shown in the
	// spec): larger values are clamped, as a DRF max_page_size does.
	maxPageSize = 1000
	maxBodySize = 8 << 20
)

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// page is one page of a Platform API list.
type page struct {
	lo, hi     int
	next, prev any // URL string or nil
}

// paginate applies page and page_size to a list of total items. It writes
// the 404 "Invalid page." itself and reports false then.
// Links are built on base (see Sim.baseURL).
func paginate(w http.ResponseWriter, r *http.Request, base string, total, defSize int) (page, bool) {
	q := r.URL.Query()
	size := defSize
	if v, err := strconv.Atoi(q.Get("page_size")); err == nil && v > 0 {
		size = min(v, maxPageSize)
	}
	num := 1
	if ps := q.Get("page"); ps != "" {
		v, err := strconv.Atoi(ps)
		if err != nil || v < 1 {
			errInvalidPage(w)
			return page{}, false
		}
		num = v
	}
	pages := max(1, (total+size-1)/size)
	if num > pages {
		errInvalidPage(w)
		return page{}, false
	}
	p := page{lo: (num - 1) * size, hi: min(num*size, total)}
	if num < pages {
		p.next = pageURL(base, r, func(q url.Values) { q.Set("page", strconv.Itoa(num+1)) })
	}
	if num > 1 {
		p.prev = pageURL(base, r, func(q url.Values) {
			if num == 2 {
				q.Del("page")
			} else {
				q.Set("page", strconv.Itoa(num-1))
			}
		})
	}
	return p, true
}

type listBody struct {
	Count    int   `json:"count"`
	Next     any   `json:"next"`
	Previous any   `json:"previous"`
	Results  []any `json:"results"`
}

func writeList[T any](w http.ResponseWriter, r *http.Request, base string, items []T, defSize int, render func(T) any) {
	p, ok := paginate(w, r, base, len(items), defSize)
	if !ok {
		return
	}
	res := make([]any, 0, p.hi-p.lo)
	for _, it := range items[p.lo:p.hi] {
		res = append(res, render(it))
	}
	writeJSON(w, http.StatusOK, listBody{Count: len(items), Next: p.next, Previous: p.prev, Results: res})
}

// Filters. Only a few lookups are understood; every other query key, and a
// known key with a value it cannot use, is ignored, so the list may come back
// whole, as the spec says the service does with invalid filter syntax.

// parseInList reads the value of an __in lookup: a comma-separated list
// ("a,b"), or the same in one pair of square brackets with items optionally
// quoted ("[a,b]", `["a","b"]`). ok is false for invalid syntax: an unclosed
// quote, brackets, parentheses or braces that do not balance, a square
// bracket inside an item (a nested list), or no item at all.
func parseInList(v string) (items []string, ok bool) {
	if !balanced(v) {
		return nil, false
	}
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '[' && v[len(v)-1] == ']' && balanced(v[1:len(v)-1]) {
		v = v[1 : len(v)-1]
	}
	var quote byte
	start := 0
	flush := func(end int) bool {
		it := strings.TrimSpace(v[start:end])
		if len(it) >= 2 && (it[0] == '"' || it[0] == '\'') && it[len(it)-1] == it[0] {
			it = it[1 : len(it)-1]
		} else if strings.ContainsAny(it, "[]") {
			return false
		}
		if it != "" {
			items = append(items, it)
		}
		return true
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == ',':
			if !flush(i) {
				return nil, false
			}
			start = i + 1
		}
	}
	if !flush(len(v)) || len(items) == 0 {
		return nil, false
	}
	return items, true
}

// balanced reports whether the quotes of v are closed and its brackets,
// parentheses and braces (outside quotes) balance and nest.
func balanced(v string) bool {
	var stack []byte
	var quote byte
	for i := 0; i < len(v); i++ {
		c := v[i]
		if quote != 0 {
			if c == quote {
				quote = 0
			}
			continue
		}
		switch c {
		case '"', '\'':
			quote = c
		case '[', '(', '{':
			stack = append(stack, c)
		case ']', ')', '}':
			open := map[byte]byte{']': '[', ')': '(', '}': '{'}[c]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return quote == 0 && len(stack) == 0
}

func filterBy[T any](items []T, q url.Values, fields map[string]func(T) []string) []T {
	out := items
	for key, vals := range q {
		if len(vals) == 0 || vals[0] == "" {
			continue
		}
		name, op, _ := strings.Cut(key, "__")
		get, ok := fields[name]
		if !ok {
			continue
		}
		var keep func([]string) bool
		switch op {
		case "", "exact":
			want := vals[0]
			keep = func(have []string) bool { return len(have) > 0 && have[0] == want }
		case "in":
			want, ok := parseInList(vals[0])
			if !ok {
				continue // invalid syntax: ignored
			}
			keep = func(have []string) bool {
				for _, w := range want {
					if len(have) > 0 && have[0] == w {
						return true
					}
				}
				return false
			}
		case "contains":
			want := vals[0]
			keep = func(have []string) bool {
				for _, h := range have {
					if h == want {
						return true
					}
				}
				return false
			}
		default:
			continue // a lookup we do not know: ignored
		}
		var f []T
		for _, it := range out {
			if keep(get(it)) {
				f = append(f, it)
			}
		}
		out = f
	}
	return out
}

var deviceFilters = map[string]func(*device) []string{
	"id":    func(d *device) []string { return []string{d.id} },
	"label": func(d *device) []string { return []string{d.label} },
	"name":  func(d *device) []string { return []string{d.name} },
	"tags":  func(d *device) []string { return d.tags },
}

var variableFilters = map[string]func(*variable) []string{
	"id":     func(v *variable) []string { return []string{v.id} },
	"label":  func(v *variable) []string { return []string{v.label} },
	"name":   func(v *variable) []string { return []string{v.name} },
	"device": func(v *variable) []string { return []string{v.dev.id} },
}

var groupFilters = map[string]func(*group) []string{
	"id":    func(g *group) []string { return []string{g.id} },
	"label": func(g *group) []string { return []string{g.label} },
	"tags":  func(g *group) []string { return g.tags },
}

// Lookups by key (caller holds s.mu).

func (s *Sim) lookupDevice(key string) *device {
	if l, ok := strings.CutPrefix(key, "~"); ok {
		return s.devByLabel[l]
	}
	return s.devByID[key]
}

func (s *Sim) lookupOrg(key string) *org {
	l, byLabel := strings.CutPrefix(key, "~")
	for _, o := range s.orgs {
		if (byLabel && o.label == l) || (!byLabel && o.id == key) {
			return o
		}
	}
	return nil
}

func (s *Sim) lookupGroup(key string) *group {
	l, byLabel := strings.CutPrefix(key, "~")
	for _, g := range s.groups {
		if (byLabel && g.label == l) || (!byLabel && g.id == key) {
			return g
		}
	}
	return nil
}

func (s *Sim) lookupEvent(key string) *event {
	l, byLabel := strings.CutPrefix(key, "~")
	for _, e := range s.events {
		if (byLabel && e.label == l) || (!byLabel && e.id == key) {
			return e
		}
	}
	return nil
}

// Representations.

type orgJSON struct {
	URL       string `json:"url"`
	ID        string `json:"id"`
	Label     string `json:"label"`
	Name      string `json:"name"`
	CreatedAt string `json:"createdAt"`
}

func renderOrg(base string, o *org) any {
	return orgJSON{URL: base + "/api/v2.0/organizations/" + o.id + "/", ID: o.id, Label: o.label, Name: o.name, CreatedAt: isoTime(o.createdAt)}
}

type deviceJSON struct {
	URL            string         `json:"url"`
	ID             string         `json:"id"`
	Label          string         `json:"label"`
	Name           string         `json:"name"`
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
		URL: base + "/api/v2.0/devices/" + d.id + "/", ID: d.id, Label: d.label, Name: d.name, Description: d.description,
		Properties: props, Tags: tags, CreatedAt: isoTime(d.createdAt), LastActivity: activityJSON(s.deviceActivity(d)), VariablesCount: len(d.vars),
	}
}

type deviceSummaryJSON struct {
	URL       string `json:"url"`
	ID        string `json:"id"`
	Label     string `json:"label"`
	Name      string `json:"name"`
	CreatedAt string `json:"createdAt"`
}

func renderDeviceSummary(base string, d *device) any {
	return deviceSummaryJSON{URL: base + "/api/v2.0/devices/" + d.id + "/", ID: d.id, Label: d.label, Name: d.name, CreatedAt: isoTime(d.createdAt)}
}

type deviceRefJSON struct {
	URL   string `json:"url"`
	ID    string `json:"id"`
	Label string `json:"label"`
	Name  string `json:"name"`
}

type variableJSON struct {
	URL          string          `json:"url"`
	ID           string          `json:"id"`
	Label        string          `json:"label"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	Properties   map[string]any  `json:"properties"`
	Device       deviceRefJSON   `json:"device"`
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
		URL: base + "/api/v2.0/variables/" + v.id + "/", ID: v.id, Label: v.label, Name: v.name, Description: "",
		Properties: props,
		Device:     deviceRefJSON{URL: base + "/api/v2.0/devices/" + v.dev.id + "/", ID: v.dev.id, Label: v.dev.label, Name: v.dev.name},
		CreatedAt:  isoTime(v.createdAt), LastActivity: activityJSON(s.varActivity(v)), LastValue: lv,
	}
}

type groupJSON struct {
	URL          string   `json:"url"`
	ID           string   `json:"id"`
	Label        string   `json:"label"`
	Name         string   `json:"name"`
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
	return groupJSON{URL: base + "/api/v2.0/device_groups/" + g.id + "/", ID: g.id, Label: g.label, Name: g.name, Organization: g.org.id, Tags: tags, Devices: ids, CreatedAt: isoTime(g.createdAt)}
}

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
	s.mu.RLock()
	defer s.mu.RUnlock()
	o := s.lookupOrg(p[0])
	if o == nil {
		errNotFound(w)
		return
	}
	base := s.baseURL(r)
	writeList(w, r, base, filterBy(o.devices, r.URL.Query(), deviceFilters), defaultPageSize, func(d *device) any { return s.renderDevice(base, d) })
}

type dashboardJSON struct {
	URL          string `json:"url"`
	ID           string `json:"id"`
	Label        string `json:"label"`
	Name         string `json:"name"`
	Organization string `json:"organization"`
	CreatedAt    string `json:"createdAt"`
}

func (s *Sim) listOrgDashboards(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o := s.lookupOrg(p[0])
	if o == nil {
		errNotFound(w)
		return
	}
	base := s.baseURL(r)
	writeList(w, r, base, o.dashboards, defaultPageSize, func(d *dashboard) any {
		return dashboardJSON{URL: base + "/api/v2.0/dashboards/" + d.id + "/", ID: d.id, Label: d.label, Name: d.name, Organization: o.id, CreatedAt: isoTime(d.createdAt)}
	})
}

// Devices.

func (s *Sim) listDevices(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	base := s.baseURL(r)
	writeList(w, r, base, filterBy(s.devices, r.URL.Query(), deviceFilters), defaultPageSize, func(d *device) any { return s.renderDevice(base, d) })
}

func (s *Sim) getDevice(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.lookupDevice(p[0])
	if d == nil {
		errNotFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.renderDevice(s.baseURL(r), d))
}

// readBody reads and parses a JSON body; it answers malformed JSON itself.
func readBody(w http.ResponseWriter, r *http.Request) (any, bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBodySize))
	if err != nil {
		errDetail(w, http.StatusBadRequest, "Could not read the request body.")
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("Expecting value: line 1 column 1 (char 0)")
		}
		errJSONParse(w, err)
		return nil, false
	}
	if dec.More() {
		errJSONParse(w, errors.New("Extra data after the JSON value"))
		return nil, false
	}
	return v, true
}

func stringList(v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for _, x := range arr {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func numberToAny(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return float64(i)
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = numberToAny(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = numberToAny(e)
		}
		return out
	}
	return v
}

// patchDevice merges properties key by key and replaces tags; read-only
// fields (url, id, createdAt, lastActivity, variablesCount) and unknown
// fields are accepted and ignored.
func (s *Sim) patchDevice(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	obj, ok := body.(map[string]any)
	if !ok {
		errValidation(w, map[string][]string{"non_field_errors": {fmt.Sprintf("Invalid data. Expected a dictionary, but got %s.", jsonTypeName(body))}})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.lookupDevice(p[0])
	if d == nil {
		errNotFound(w)
		return
	}
	problems := map[string][]string{}
	var label, name, desc *string
	var props map[string]any
	var tags []string
	var setTags bool
	if v, ok := obj["label"]; ok {
		str, isStr := v.(string)
		switch {
		case !isStr:
			problems["label"] = []string{"Not a valid string."}
		case str == "" || strings.Contains(str, "/") || strings.HasPrefix(str, "~"):
			problems["label"] = []string{"Enter a valid label."}
		case len([]rune(str)) > 100:
			problems["label"] = []string{"Ensure this field has no more than 100 characters."}
		case s.devByLabel[str] != nil && s.devByLabel[str] != d:
			problems["label"] = []string{"device with this label already exists."}
		default:
			label = &str
		}
	}
	if v, ok := obj["name"]; ok {
		str, isStr := v.(string)
		switch {
		case !isStr:
			problems["name"] = []string{"Not a valid string."}
		case len([]rune(str)) > 200:
			problems["name"] = []string{"Ensure this field has no more than 200 characters."}
		default:
			name = &str
		}
	}
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
	if v, ok := obj["tags"]; ok {
		if t, isList := stringList(v); isList {
			tags, setTags = t, true
		} else {
			problems["tags"] = []string{"Expected a list of strings."}
		}
	}
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
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case string:
		return "str"
	case json.Number:
		return "int"
	case bool:
		return "bool"
	case nil:
		return "NoneType"
	}
	return "dict"
}

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

// Device groups.

func (s *Sim) listGroups(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	base := s.baseURL(r)
	writeList(w, r, base, filterBy(s.groups, r.URL.Query(), groupFilters), defaultPageSize, func(g *group) any { return renderGroup(base, g) })
}

func (s *Sim) getGroup(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.lookupGroup(p[0])
	if g == nil {
		errNotFound(w)
		return
	}
	writeJSON(w, http.StatusOK, renderGroup(s.baseURL(r), g))
}

// groupFieldsFrom validates the writable group fields of a create or patch.
func (s *Sim) groupFieldsFrom(obj map[string]any, self *group, create bool) (label, name *string, o *org, tags []string, setTags bool, problems map[string][]string) {
	problems = map[string][]string{}
	if v, ok := obj["label"]; ok {
		str, isStr := v.(string)
		switch {
		case !isStr:
			problems["label"] = []string{"Not a valid string."}
		case str == "" || strings.Contains(str, "/") || strings.HasPrefix(str, "~"):
			problems["label"] = []string{"Enter a valid label."}
		case len([]rune(str)) > 100:
			problems["label"] = []string{"Ensure this field has no more than 100 characters."}
		default:
			if g := s.lookupGroup("~" + str); g != nil && g != self {
				problems["label"] = []string{"device group with this label already exists."}
			} else {
				label = &str
			}
		}
	} else if create {
		problems["label"] = []string{"This field is required."}
	}
	if v, ok := obj["name"]; ok {
		str, isStr := v.(string)
		switch {
		case !isStr:
			problems["name"] = []string{"Not a valid string."}
		case len([]rune(str)) > 200:
			problems["name"] = []string{"Ensure this field has no more than 200 characters."}
		default:
			name = &str
		}
	}
	if create {
		if v, ok := obj["organization"]; !ok {
			problems["organization"] = []string{"This field is required."}
		} else if str, isStr := v.(string); !isStr {
			problems["organization"] = []string{"Not a valid string."}
		} else if o = s.lookupOrg(str); o == nil {
			problems["organization"] = []string{fmt.Sprintf("Invalid organization %q - object does not exist.", str)}
		}
	}
	if v, ok := obj["tags"]; ok {
		if t, isList := stringList(v); isList {
			tags, setTags = t, true
		} else {
			problems["tags"] = []string{"Expected a list of strings."}
		}
	}
	return
}

func (s *Sim) createGroup(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	obj, ok := body.(map[string]any)
	if !ok {
		errValidation(w, map[string][]string{"non_field_errors": {fmt.Sprintf("Invalid data. Expected a dictionary, but got %s.", jsonTypeName(body))}})
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
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	obj, ok := body.(map[string]any)
	if !ok {
		errValidation(w, map[string][]string{"non_field_errors": {fmt.Sprintf("Invalid data. Expected a dictionary, but got %s.", jsonTypeName(body))}})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupGroup(p[0])
	if g == nil {
		errNotFound(w)
		return
	}
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
}

func (s *Sim) deleteGroup(w http.ResponseWriter, _ *http.Request, p []string, _ TokenKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupGroup(p[0])
	if g == nil {
		errNotFound(w)
		return
	}
	out := s.groups[:0:0]
	for _, x := range s.groups {
		if x != g {
			out = append(out, x)
		}
	}
	s.groups = out
	w.WriteHeader(http.StatusNoContent)
}

func (s *Sim) listGroupDevices(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.lookupGroup(p[0])
	if g == nil {
		errNotFound(w)
		return
	}
	base := s.baseURL(r)
	writeList(w, r, base, filterBy(g.members, r.URL.Query(), deviceFilters), defaultPageSize, func(d *device) any { return s.renderDevice(base, d) })
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

func (s *Sim) assignDevices(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	keys, ok := s.memberBody(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupGroup(p[0])
	if g == nil {
		errNotFound(w)
		return
	}
	devs, ok := s.resolveDevices(w, keys)
	if !ok {
		return
	}
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
	keys, ok := s.memberBody(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupGroup(p[0])
	if g == nil {
		errNotFound(w)
		return
	}
	devs, ok := s.resolveDevices(w, keys)
	if !ok {
		return
	}
	for _, d := range devs {
		g.members = removeDevice(g.members, d)
	}
	writeJSON(w, http.StatusOK, listBody{Results: []any{}})
}

// Event logs: cursor pagination.

type cursorBody struct {
	Next     any   `json:"next"`
	Previous any   `json:"previous"`
	Results  []any `json:"results"`
}

type eventLogJSON struct {
	ID        string  `json:"id"`
	CreatedAt string  `json:"createdAt"`
	Value     float64 `json:"value"`
	Device    string  `json:"device"`
	Variable  string  `json:"variable"`
	Message   string  `json:"message"`
}

// The cursor is an opaque token carrying the offset into the newest-first
// log list; clients must follow next verbatim.
func encodeCursor(off int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o=" + strconv.Itoa(off) + "&v=1"))
}

func decodeCursor(c string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	rest, ok := strings.CutPrefix(string(b), "o=")
	if !ok {
		return 0, false
	}
	num, _, _ := strings.Cut(rest, "&")
	off, err := strconv.Atoi(num)
	return off, err == nil && off >= 0
}

func (s *Sim) listEventLogs(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.mu.RLock()
	e := s.lookupEvent(p[0])
	var logs []EventLog
	if e != nil {
		logs = e.logs
	}
	s.mu.RUnlock()
	if e == nil {
		errNotFound(w)
		return
	}
	q := r.URL.Query()
	off := 0
	if c := q.Get("cursor"); c != "" {
		o, ok := decodeCursor(c)
		if !ok {
			errDetail(w, http.StatusNotFound, "Invalid cursor")
			return
		}
		off = min(o, len(logs))
	}
	// No default page size: without page_size the whole history returns.
	size := math.MaxInt
	if v, err := strconv.Atoi(q.Get("page_size")); err == nil && v > 0 {
		size = v
	}
	end := len(logs)
	if size < end-off {
		end = off + size
	}
	body := cursorBody{Results: []any{}}
	for _, l := range logs[off:end] {
		body.Results = append(body.Results, eventLogJSON{ID: l.ID, CreatedAt: isoTime(l.CreatedAt), Value: l.Value, Device: l.DeviceID, Variable: l.VariableID, Message: l.Message})
	}
	withCursor := func(o int) string {
		return pageURL(s.baseURL(r), r, func(q url.Values) {
			q.Del("page")
			q.Set("cursor", encodeCursor(o))
		})
	}
	if end < len(logs) {
		body.Next = withCursor(end)
	}
	if off > 0 {
		body.Previous = withCursor(max(off-size, 0))
	}
	writeJSON(w, http.StatusOK, body)
}
