package fleetsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

var authFailure = map[string]any{"code": 401002, "message": "Incorrect authentication credentials."}

func TestEveryAuthenticationFailureGivesTheSame401(t *testing.T) {
	e := newEnv(t, Options{TokenTTL: time.Hour})
	vid := e.variableIDs()[0]
	e.sim.AddToken("short", TokenOrdinary, time.Minute)
	e.clock.Advance(2 * time.Minute) // "short" has expired
	cases := []struct {
		name, method, path, token string
	}{
		{"missing header", "GET", "/api/v2.0/devices/", "-"},
		{"empty header", "GET", "/api/v2.0/devices/", ""},
		{"wrong token", "GET", "/api/v2.0/devices/", "wrong"},
		{"expired token", "GET", "/api/v2.0/devices/", "short"},
		{"empty ?token= on values", "GET", "/api/v1.6/variables/" + vid + "/values?token=", "-"},
		{"wrong ?token= on values", "GET", "/api/v1.6/variables/" + vid + "/values?token=nope", "-"},
		{"?token= where the spec does not allow it", "GET", "/api/v2.0/devices/?token=" + testToken, "-"},
		{"?token= on raw series", "POST", "/api/v1.6/data/raw/series?token=" + testToken, "-"},
		{"wrong token on OPTIONS", "OPTIONS", "/api/v2.0/devices/", "wrong"},
		{"wrong token on organizations never gives 403", "GET", "/api/v2.0/organizations/", "wrong"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expect(t, c.name, e.do(c.method, c.path, `{"variables":["`+vid+`"]}`, c.token), 401, authFailure)
		})
	}
}

func TestQueryTokenIsAcceptedOnValuesAndAggregation(t *testing.T) {
	e := newEnv(t, Options{})
	vid := e.variableIDs()[0]
	expect(t, "values ?token=", e.do("GET", "/api/v1.6/variables/"+vid+"/values?token="+testToken, nil, "-"), 200, nil)
	expect(t, "aggregation ?token=", e.do("POST", "/api/v1.6/data/stats/aggregation/?token="+testToken, map[string]any{"variables": []string{vid}, "aggregation": "count"}, "-"), 200, nil)
	r := e.do("GET", "/api/v1.6/variables/"+vid+"/values?token="+testToken+"&page_size=5", nil, "-")
	if strings.Contains(string(r.body), testToken) {
		t.Fatalf("the token leaked into a URL the simulator built: %s", r.body)
	}
}

func TestTokensExpireAfterTheirTTL(t *testing.T) {
	e := newEnv(t, Options{TokenTTL: 10 * time.Second})
	expect(t, "fresh token", e.get("/api/v2.0/devices/"), 200, nil)
	e.clock.Advance(9 * time.Second)
	expect(t, "token at 9 s", e.get("/api/v2.0/devices/"), 200, nil)
	e.clock.Advance(time.Second)
	expect(t, "token at its TTL", e.get("/api/v2.0/devices/"), 401, authFailure)
	e.sim.AddToken(testToken, TokenOrdinary, 0) // renewed for the default TTL from now
	expect(t, "renewed token", e.get("/api/v2.0/devices/"), 200, nil)
	e.sim.ExpireTokens()
	expect(t, "after ExpireTokens", e.get("/api/v2.0/devices/"), 401, authFailure)
}

func TestExpireTokenExpiresThatTokenAlone(t *testing.T) {
	e := newEnv(t, Options{TokenTTL: time.Hour})
	e.sim.AddToken("next", TokenOrdinary, 0)
	e.sim.ExpireToken(testToken)
	expect(t, "the expired token", e.get("/api/v2.0/devices/"), 401, authFailure)
	expect(t, "the other token", e.do("GET", "/api/v2.0/devices/", nil, "next"), 200, nil)
	e.sim.ExpireToken("never-added") // not a token: nothing changes
	expect(t, "the other token still", e.do("GET", "/api/v2.0/devices/", nil, "next"), 200, nil)
}

func TestOrganizationsNeedAnOrganizationOrAccountToken(t *testing.T) {
	e := newEnv(t, Options{OrgTokens: []string{"org"}, AccountTokens: []string{"acct"}, Tokens: []string{testToken}})
	o := e.sim.Organizations()[0]
	perm := map[string]any{"detail": "You do not have permission to perform this action."}
	for _, path := range []string{"/api/v2.0/organizations/", "/api/v2.0/organizations/" + o.ID + "/", "/api/v2.0/organizations/~" + o.Label + "/", "/api/v2.0/organizations/unknown/"} {
		expect(t, "ordinary token on "+path, e.get(path), 403, perm)
	}
	for _, tok := range []string{"org", "acct"} {
		r := e.do("GET", "/api/v2.0/organizations/", nil, tok)
		expect(t, tok+" token lists organizations", r, 200, nil)
		if c := r.json(t)["count"]; c != float64(len(e.sim.Organizations())) {
			t.Fatalf("organizations count %v", c)
		}
		r = e.do("GET", "/api/v2.0/organizations/~"+o.Label+"/", nil, tok)
		expect(t, tok+" token reads an organization by label", r, 200, nil)
		if r.json(t)["id"] != o.ID {
			t.Fatalf("organization by label: %s", r.body)
		}
		expect(t, tok+" token on an unknown organization", e.do("GET", "/api/v2.0/organizations/nope/", nil, tok), 404, nil)
	}
	r := e.get("/api/v2.0/organizations/" + o.ID + "/devices/")
	expect(t, "ordinary token reads an organization's devices", r, 200, nil)
	want := 0
	for _, d := range e.sim.Devices() {
		if d.Organization == o.ID {
			want++
		}
	}
	if c := r.json(t)["count"]; c != float64(want) {
		t.Fatalf("organization devices count %v, want %d", c, want)
	}
	r = e.get("/api/v2.0/organizations/~" + o.Label + "/dashboards/")
	expect(t, "ordinary token reads an organization's dashboards", r, 200, nil)
	if c := r.json(t)["count"]; c != float64(len(o.Dashboards)) {
		t.Fatalf("dashboards count %v", c)
	}
}

func TestPlatformListsPaginate(t *testing.T) {
	e := newEnv(t, Options{Devices: 120, Variables: 2, Points: 2})
	cases := []struct {
		name, path  string
		count, size int
	}{
		{"devices default page size 50", "/api/v2.0/devices/", 120, 50},
		{"variables default page size 200", "/api/v2.0/variables/", 240, 200},
		{"page_size honoured", "/api/v2.0/devices/?page_size=7", 120, 7},
		{"invalid page_size falls back", "/api/v2.0/devices/?page_size=abc", 120, 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seen := map[string]bool{}
			next := e.srv.URL + c.path
			pages := 0
			for next != "" {
				u, _ := url.Parse(next)
				r := e.get(u.RequestURI())
				expect(t, "page", r, 200, nil)
				m := r.json(t)
				if m["count"] != float64(c.count) {
					t.Fatalf("count %v, want %d", m["count"], c.count)
				}
				res := m["results"].([]any)
				if pages == 0 && (len(res) != min(c.size, c.count) || m["previous"] != nil) {
					t.Fatalf("first page: %d results, previous %v", len(res), m["previous"])
				}
				for _, x := range res {
					seen[x.(map[string]any)["id"].(string)] = true
				}
				next, _ = m["next"].(string)
				pages++
			}
			if len(seen) != c.count || pages != (c.count+c.size-1)/c.size {
				t.Fatalf("saw %d distinct items over %d pages", len(seen), pages)
			}
		})
	}
	expect(t, "page past the end", e.get("/api/v2.0/devices/?page=4"), 404, map[string]any{"detail": "Invalid page."})
	expect(t, "page zero", e.get("/api/v2.0/devices/?page=0"), 404, map[string]any{"detail": "Invalid page."})
	expect(t, "page not a number", e.get("/api/v2.0/devices/?page=x"), 404, map[string]any{"detail": "Invalid page."})
	r := e.get("/api/v2.0/devices/?page=3")
	if prev, _ := r.json(t)["previous"].(string); !strings.Contains(prev, "page=2") {
		t.Fatalf("previous of page 3: %q", prev)
	}
	if k := keys(t, r.body); strings.Join(k, ",") != "count,next,previous,results" {
		t.Fatalf("envelope keys %v", k)
	}
}

func TestInvalidFilterSyntaxIsIgnored(t *testing.T) {
	e := newEnv(t, Options{})
	devs := e.sim.Devices()
	count := func(q string) float64 {
		r := e.get("/api/v2.0/devices/?" + q)
		expect(t, q, r, 200, nil)
		return r.json(t)["count"].(float64)
	}
	all := float64(len(devs))
	cases := []struct {
		query string
		want  float64
	}{
		{"label=" + url.QueryEscape(devs[1].Label), 1},
		{"label__in=" + url.QueryEscape(devs[0].Label+","+devs[2].Label), 2},
		{"id=" + devs[3].ID, 1},
		{"tags__contains=" + devs[0].Tags[0], -1},
		{"label__bogus=x", all},
		{"label__in=", all},
		{"no_such_field=1", all},
		{"label%5B=oops", all},
		{"sort_by=-label", all},
	}
	for _, c := range cases {
		want := c.want
		if want < 0 {
			want = 0
			for _, d := range devs {
				for _, tg := range d.Tags {
					if tg == devs[0].Tags[0] {
						want++
					}
				}
			}
		}
		if got := count(c.query); got != want {
			t.Errorf("devices?%s: count %v, want %v", c.query, got, want)
		}
	}
}

func TestDevicesAddressedByIDOrLabel(t *testing.T) {
	e := newEnv(t, Options{})
	for _, d := range e.sim.Devices() {
		for _, key := range []string{d.ID, "~" + url.PathEscape(d.Label)} {
			r := e.get("/api/v2.0/devices/" + key + "/")
			expect(t, "device "+key, r, 200, nil)
			m := r.json(t)
			if m["id"] != d.ID || m["label"] != d.Label {
				t.Fatalf("device %s: got %s", key, r.body)
			}
			var la any = float64(d.LastActivityMs)
			if d.LastActivityMs == 0 {
				la = nil
			}
			if m["lastActivity"] != la {
				t.Fatalf("device %s lastActivity %v, want %v", key, m["lastActivity"], la)
			}
			if _, err := time.Parse(time.RFC3339Nano, m["createdAt"].(string)); err != nil {
				t.Fatalf("createdAt is not ISO-8601: %v", err)
			}
		}
	}
	notFound := map[string]any{"code": 404001, "message": "The request was not found."}
	expect(t, "unknown device", e.get("/api/v2.0/devices/~nope/"), 404, notFound)
	expect(t, "label without the ~ prefix", e.get("/api/v2.0/devices/"+url.PathEscape(e.sim.Devices()[0].Label)+"/"), 404, notFound)
	expect(t, "unknown path", e.get("/api/v2.0/nothing/"), 404, notFound)
}

func TestDevicePatchMergesPropertiesAndReplacesTags(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.sim.Devices()[0]
	r := e.do("PATCH", "/api/v2.0/devices/"+d.ID+"/", map[string]any{
		"properties": map[string]any{"model": "XL", "new": 1},
		"tags":       []string{"only"},
		"id":         "ignored-id", "url": "http://x/", "createdAt": "2000-01-01T00:00:00Z", "lastActivity": 5, // read-only: ignored
		"description": "patched",
	}, testToken)
	expect(t, "patch", r, 200, nil)
	got := e.sim.Devices()[0]
	want := map[string]any{}
	for k, v := range d.Properties {
		want[k] = v
	}
	want["model"], want["new"] = "XL", float64(1)
	if !jsonEqual(got.Properties, want) {
		t.Fatalf("properties after merge %v, want %v", got.Properties, want)
	}
	if strings.Join(got.Tags, ",") != "only" || got.ID != d.ID || !got.CreatedAt.Equal(d.CreatedAt) || got.Description != "patched" {
		t.Fatalf("after patch: %+v", got)
	}
	long := strings.Repeat("n", 201)
	r = e.do("PATCH", "/api/v2.0/devices/"+d.ID+"/", map[string]any{"name": long}, testToken)
	expect(t, "name of 201 characters", r, 400, map[string]any{"code": 400001, "message": "Validation Error.", "detail": map[string]any{"name": []string{"Ensure this field has no more than 200 characters."}}})
	expect(t, "name of 200 characters", e.do("PATCH", "/api/v2.0/devices/"+d.ID+"/", map[string]any{"name": long[:200]}, testToken), 200, nil)
	expect(t, "malformed JSON", e.do("PATCH", "/api/v2.0/devices/"+d.ID+"/", `{"name": `, testToken), 400, nil)
	if m := e.do("PATCH", "/api/v2.0/devices/"+d.ID+"/", `{"name": `, testToken).json(t); !strings.HasPrefix(m["detail"].(string), "JSON parse error - ") || len(m) != 1 {
		t.Fatalf("malformed JSON body: %v", m)
	}
	r = e.do("PATCH", "/api/v2.0/devices/"+d.ID+"/", map[string]any{"tags": "x", "properties": []int{1}}, testToken)
	expect(t, "bad types", r, 400, nil)
	if det := r.json(t)["detail"].(map[string]any); det["tags"] == nil || det["properties"] == nil {
		t.Fatalf("validation detail should name both fields: %s", r.body)
	}
}

func TestVariablesByLabelOnlyUnderTheirDevice(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.sim.Devices()[1]
	v := d.Variables[0]
	r := e.get("/api/v2.0/devices/~" + url.PathEscape(d.Label) + "/variables/~" + v.Label + "/")
	expect(t, "variable by label under its device", r, 200, nil)
	if r.json(t)["id"] != v.ID {
		t.Fatalf("got %s", r.body)
	}
	r = e.get("/api/v2.0/variables/~" + v.Label + "/")
	expect(t, "top-level ~label", r, 400, nil)
	m := r.json(t)
	if m["code"] != float64(400001) || m["message"] != "Validation Error." {
		t.Fatalf("top-level ~label body %s", r.body)
	}
	if det, ok := m["detail"].([]any); !ok || len(det) != 1 {
		t.Fatalf("detail should be an array of one string: %s", r.body)
	}
	r = e.get("/api/v2.0/variables/" + v.ID + "/")
	expect(t, "variable by id", r, 200, nil)
	lv := r.json(t)["lastValue"].(map[string]any)
	pts := e.retained(v.ID)
	if lv["timestamp"] != float64(pts[0].TimestampMs) || lv["value"] != pts[0].Value {
		t.Fatalf("lastValue %v, want newest point %+v", lv, pts[0])
	}
	expect(t, "unknown variable label", e.get("/api/v2.0/devices/"+d.ID+"/variables/~nope/"), 404, map[string]any{"code": 404001, "message": "The request was not found."})
	r = e.get("/api/v2.0/devices/" + d.ID + "/variables/")
	expect(t, "device variables", r, 200, nil)
	if c := r.json(t)["count"]; c != float64(len(d.Variables)) {
		t.Fatalf("device variables count %v", c)
	}
	r = e.get("/api/v2.0/variables/?device=" + d.ID)
	if c := r.json(t)["count"]; c != float64(len(d.Variables)) {
		t.Fatalf("variables?device= count %v", c)
	}
}

func TestDeviceGroupLifecycle(t *testing.T) {
	e := newEnv(t, Options{})
	devs := e.sim.Devices()
	o := e.sim.Organizations()[0]
	r := e.post("/api/v2.0/device_groups/", map[string]any{"label": "g-new", "name": "New", "organization": "~" + o.Label, "tags": []string{"x"}, "devices": []string{devs[0].ID}})
	expect(t, "create group", r, 201, nil)
	g := r.json(t)
	if len(g["devices"].([]any)) != 0 || g["organization"] != o.ID {
		t.Fatalf("a new group starts empty in its organization: %s", r.body)
	}
	base := "/api/v2.0/device_groups/~g-new/"
	expect(t, "duplicate label", e.post("/api/v2.0/device_groups/", map[string]any{"label": "g-new", "organization": o.ID}), 400, nil)
	expect(t, "missing organization", e.post("/api/v2.0/device_groups/", map[string]any{"label": "g-x"}), 400, nil)

	r = e.do("PATCH", base, map[string]any{"name": "Renamed", "devices": []string{devs[1].ID}}, testToken)
	expect(t, "patch ignoring devices", r, 200, nil)
	if m := r.json(t); m["name"] != "Renamed" || len(m["devices"].([]any)) != 0 {
		t.Fatalf("patch: %s", r.body)
	}

	assign := func(q string, body any) []string {
		t.Helper()
		r := e.post(base+"_/assign_devices/"+q, body)
		expect(t, "assign "+q, r, 200, nil)
		m := r.json(t)
		var ids []string
		for _, x := range m["results"].([]any) {
			d := x.(map[string]any)
			for _, k := range []string{"url", "id", "label", "name", "createdAt"} {
				if _, ok := d[k]; !ok {
					t.Fatalf("assign result lacks %s: %v", k, d)
				}
			}
			ids = append(ids, d["id"].(string))
		}
		if m["count"] != float64(len(ids)) {
			t.Fatalf("assign count %v for %d results", m["count"], len(ids))
		}
		return ids
	}
	got := assign("", []any{devs[0].ID, "~" + devs[1].Label, map[string]any{"id": devs[2].ID}})
	if strings.Join(got, ",") != strings.Join([]string{devs[0].ID, devs[1].ID, devs[2].ID}, ",") {
		t.Fatalf("mixed identifier forms: members %v", got)
	}
	got = assign("?clear=false", []any{devs[3].ID, devs[0].ID})
	if len(got) != 4 {
		t.Fatalf("clear=false appends: %v", got)
	}
	got = assign("?clear=true", []any{"~" + devs[2].Label})
	if len(got) != 1 || got[0] != devs[2].ID {
		t.Fatalf("clear=true replaces: %v", got)
	}
	r = e.post(base+"_/assign_devices/", []any{"~no-such-device"})
	expect(t, "assign an unknown device", r, 400, nil)
	if _, ok := r.json(t)["detail"].([]any); !ok {
		t.Fatalf("unknown device detail should be an array: %s", r.body)
	}
	expect(t, "assign with an object body", e.post(base+"_/assign_devices/", map[string]any{"id": devs[0].ID}), 400, nil)

	assign("", []any{devs[0].ID, devs[1].ID})
	r = e.post(base+"_/remove_devices/", []any{map[string]any{"id": devs[2].ID}, "~" + devs[0].Label})
	expect(t, "remove", r, 200, map[string]any{"count": 0, "next": nil, "previous": nil, "results": []any{}})
	r = e.get(base + "devices/")
	expect(t, "members", r, 200, nil)
	if m := r.json(t); m["count"] != float64(1) || m["results"].([]any)[0].(map[string]any)["id"] != devs[1].ID {
		t.Fatalf("members after remove: %s", r.body)
	}
	expect(t, "delete group", e.do("DELETE", base, nil, testToken), 204, nil)
	expect(t, "deleted group", e.get(base), 404, nil)
	r = e.get("/api/v2.0/device_groups/")
	if c := r.json(t)["count"]; c != float64(len(e.sim.Groups())) {
		t.Fatalf("group list count %v, want %d", c, len(e.sim.Groups()))
	}
}

func TestEventLogsUseACursorEnvelope(t *testing.T) {
	e := newEnv(t, Options{})
	ev := e.sim.Events()[0]
	r := e.get("/api/v2.0/events/" + ev.ID + "/logs/")
	expect(t, "logs without page_size", r, 200, nil)
	if k := keys(t, r.body); strings.Join(k, ",") != "next,previous,results" {
		t.Fatalf("cursor envelope keys %v, want next,previous,results (no count)", k)
	}
	m := r.json(t)
	if len(m["results"].([]any)) != len(ev.Logs) || m["next"] != nil || m["previous"] != nil {
		t.Fatalf("without page_size the whole history (%d) returns at once: %s", len(ev.Logs), r.body)
	}
	var ids []string
	next := "/api/v2.0/events/~" + ev.Label + "/logs/?page_size=10&page=3"
	for i := 0; next != ""; i++ {
		r := e.get(next)
		expect(t, "logs page", r, 200, nil)
		m := r.json(t)
		if (i == 0) != (m["previous"] == nil) {
			t.Fatalf("page %d previous = %v", i, m["previous"])
		}
		for _, x := range m["results"].([]any) {
			l := x.(map[string]any)
			if _, err := time.Parse(time.RFC3339Nano, l["createdAt"].(string)); err != nil {
				t.Fatalf("log createdAt: %v", err)
			}
			ids = append(ids, l["id"].(string))
		}
		n, _ := m["next"].(string)
		if n != "" {
			u, _ := url.Parse(n)
			n = u.RequestURI()
		}
		next = n
	}
	if len(ids) != len(ev.Logs) || ids[0] != ev.Logs[0].ID {
		t.Fatalf("paged logs: %d ids, want %d starting with the newest", len(ids), len(ev.Logs))
	}
	expect(t, "forged cursor", e.get("/api/v2.0/events/"+ev.ID+"/logs/?cursor=%21%21"), 404, nil)
	expect(t, "unknown event", e.get("/api/v2.0/events/nope/logs/"), 404, nil)
}

func TestOptionsDescribesEveryEndpoint(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.sim.Devices()[0]
	r := e.do("OPTIONS", "/api/v2.0/devices/"+d.ID+"/", nil, testToken)
	expect(t, "OPTIONS device", r, 200, nil)
	m := r.json(t)
	if m["name"] == "" {
		t.Fatalf("no name: %s", r.body)
	}
	patch := m["actions"].(map[string]any)["PATCH"].(map[string]any)
	name := patch["name"].(map[string]any)
	if name["max_length"] != float64(200) || name["read_only"] != false || name["type"] != "string" || name["required"] != false || name["label"] == nil {
		t.Fatalf("device name description: %v", name)
	}
	if patch["createdAt"].(map[string]any)["read_only"] != true {
		t.Fatalf("createdAt should be read-only: %v", patch["createdAt"])
	}
	for _, p := range []string{"/api/v2.0/devices/", "/api/v2.0/device_groups/", "/api/v2.0/variables/", "/api/v1.6/data/raw/series", "/api/v1.6/data/stats/aggregation/", "/api/v2.0/events/x/logs/"} {
		r := e.do("OPTIONS", p, nil, testToken)
		expect(t, "OPTIONS "+p, r, 200, nil)
		if _, ok := r.json(t)["actions"].(map[string]any); !ok {
			t.Fatalf("OPTIONS %s: no actions: %s", p, r.body)
		}
	}
	if g := e.do("OPTIONS", "/api/v2.0/device_groups/", nil, testToken).json(t)["actions"].(map[string]any)["POST"].(map[string]any)["devices"].(map[string]any); g["read_only"] != true {
		t.Fatalf("group devices should be read-only: %v", g)
	}
}

func TestWrongMethodsAnd405(t *testing.T) {
	e := newEnv(t, Options{})
	for _, p := range []string{"/api/v1.6/data/raw/series", "/api/v1.6/data/stats/aggregation/"} {
		r := e.get(p)
		expect(t, "GET "+p, r, 405, map[string]any{"code": 405001, "message": "Method not allowed.", "detail": `Method "GET" not allowed.`})
		if k := keys(t, r.body); strings.Join(k, ",") != "code,message,detail" {
			t.Fatalf("405 key order %v", k)
		}
	}
	expect(t, "DELETE a device", e.do("DELETE", fmt.Sprintf("/api/v2.0/devices/%s/", e.sim.Devices()[0].ID), nil, testToken), 405, nil)
}

func TestInvalidListFilterSyntaxIsIgnoredOnEveryList(t *testing.T) {
	e := newEnv(t, Options{Devices: 8, Variables: 4, Points: 20})
	devs := e.sim.Devices()
	groups := e.sim.Groups()
	orgs := e.sim.Organizations()
	d0 := devs[0]
	var g Group // a group with at least two members
	for _, x := range groups {
		if len(x.Devices) >= 2 {
			g = x
			break
		}
	}
	labelOf := map[string]string{}
	for _, d := range devs {
		labelOf[d.ID] = d.Label
	}
	var orgDevs []string
	for _, d := range devs {
		if d.Organization == orgs[0].ID {
			orgDevs = append(orgDevs, d.Label)
		}
	}
	varsLabelled := func(label string) int {
		n := 0
		for _, d := range devs {
			for _, v := range d.Variables {
				if v.Label == label {
					n++
				}
			}
		}
		return n
	}
	lists := []struct {
		name, path string
		all        int
		// valid is a label filter value and the count it must give.
		valid      string
		validCount int
	}{
		{"devices", "/api/v2.0/devices/", len(devs), devs[1].Label, 1},
		{"variables", "/api/v2.0/variables/", len(e.variableIDs()), "humidity", varsLabelled("humidity")},
		{"device's variables", "/api/v2.0/devices/" + d0.ID + "/variables/", len(d0.Variables), d0.Variables[1].Label, 1},
		{"groups", "/api/v2.0/device_groups/", len(groups), groups[0].Label, 1},
		{"organization's devices", "/api/v2.0/organizations/" + orgs[0].ID + "/devices/", len(orgDevs), orgDevs[0], 1},
		{"group's devices", "/api/v2.0/device_groups/" + g.ID + "/devices/", len(g.Devices), labelOf[g.Devices[1]], 1},
	}
	for _, l := range lists {
		t.Run(l.name, func(t *testing.T) {
			count := func(query string) float64 {
				t.Helper()
				r := e.get(l.path + "?page_size=1000&" + query)
				expect(t, query, r, 200, nil)
				return r.json(t)["count"].(float64)
			}
			if got := count(""); got != float64(l.all) {
				t.Fatalf("unfiltered count %v, want %d", got, l.all)
			}
			for _, bad := range []string{"[[[", "a,[b", "]", `"unclosed`, "x)", "[[a],[b]]", "[]", ","} {
				q := "label__in=" + url.QueryEscape(bad)
				if got := count(q); got != float64(l.all) {
					t.Errorf("invalid syntax %s: count %v, want every object (%d)", q, got, l.all)
				}
			}
			for _, good := range []string{l.valid, "[" + l.valid + "]", `["` + l.valid + `"]`, l.valid + ",no-such-label", "no-such-label, " + l.valid} {
				q := "label__in=" + url.QueryEscape(good)
				if got := count(q); got != float64(l.validCount) {
					t.Errorf("valid filter %s: count %v, want %d", q, got, l.validCount)
				}
			}
			if got := count("label__in=no-such-label"); got != 0 {
				t.Errorf("a valid filter matching nothing: count %v, want 0", got)
			}
		})
	}
}

func TestAPageThatNoLongerExistsIsAnInvalidPage(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.sim.Devices()[0]
	path := "/api/v2.0/devices/" + d.ID + "/variables/"
	r := e.get(path + "?page_size=2")
	expect(t, "page 1", r, 200, nil)
	m := r.json(t)
	next, _ := m["next"].(string)
	if m["count"] != float64(len(d.Variables)) || next == "" {
		t.Fatalf("page 1: count %v, next %v; want %d and a next link", m["count"], m["next"], len(d.Variables))
	}
	expect(t, "page 2 before the deletions", e.get(path+"?page_size=2&page=2"), 200, nil)
	for _, v := range d.Variables[2:] {
		if err := e.sim.DeleteVariable(v.ID); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := url.Parse(next)
	invalid := map[string]any{"detail": "Invalid page."}
	expect(t, "the next link of page 1 after the list shrank", e.get(u.RequestURI()), 404, invalid)
	expect(t, "page 2 after the list shrank", e.get(path+"?page_size=2&page=2"), 404, invalid)
	r = e.get(path + "?page_size=2")
	expect(t, "page 1 after the deletions", r, 200, nil)
	if m := r.json(t); m["count"] != 2.0 || m["next"] != nil {
		t.Errorf("page 1 after the deletions: count %v, next %v; want 2 and null", m["count"], m["next"])
	}
	gone := d.Variables[3].ID
	expect(t, "a deleted variable", e.get("/api/v2.0/variables/"+gone+"/"), 404, map[string]any{"code": 404001, "message": "The request was not found."})
	expect(t, "raw series of a deleted variable", e.post("/api/v1.6/data/raw/series", map[string]any{"variables": []string{gone}}), 404, nil)
	if e.sim.Points(gone) != nil || len(e.sim.Devices()[0].Variables) != 2 {
		t.Errorf("the oracle still has the deleted variables")
	}
	if err := e.sim.DeleteVariable(gone); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleting a deleted variable: %v, want ErrNotFound", err)
	}
	// The same over the control interface.
	id := d.Variables[1].ID
	expect(t, "DELETE /_sim/variables/{id}", e.do("DELETE", "/_sim/variables/"+id, nil, "-"), 204, nil)
	expect(t, "DELETE it again", e.do("DELETE", "/_sim/variables/"+id, nil, "-"), 404, nil)
	expect(t, "page 2 of a shorter list", e.get(path+"?page_size=1&page=2"), 404, invalid)
}

func TestPublicURLBuildsTheLinksOfAServiceBehindAProxy(t *testing.T) {
	// A proxy that serves the simulator under /fleet.
	var sim http.Handler
	proxy := httptest.NewServer(http.StripPrefix("/fleet", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sim.ServeHTTP(w, r) })))
	defer proxy.Close()
	public := proxy.URL + "/fleet/"
	e := newEnv(t, Options{Devices: 7, Variables: 1, Points: 30, PublicURL: public})
	sim = e.sim
	get := func(link string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("GET", link, nil)
		req.Header.Set("X-Auth-Token", testToken)
		resp, err := proxy.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&m) != nil {
			t.Fatalf("GET %s: %d", link, resp.StatusCode)
		}
		return m
	}
	seen := 0
	for link := proxy.URL + "/fleet/api/v2.0/devices/?page_size=2"; link != ""; {
		m := get(link)
		for _, k := range []string{"next", "previous"} {
			if l, ok := m[k].(string); ok && !strings.HasPrefix(l, proxy.URL+"/fleet/api/v2.0/devices/?") {
				t.Fatalf("%s link %q does not use the public URL %s", k, l, public)
			}
		}
		for _, x := range m["results"].([]any) {
			if u := x.(map[string]any)["url"].(string); !strings.HasPrefix(u, proxy.URL+"/fleet/api/v2.0/devices/") {
				t.Fatalf("device url %q does not use the public URL", u)
			}
			seen++
		}
		link, _ = m["next"].(string)
	}
	if seen != 7 {
		t.Errorf("following next through the proxy listed %d devices, want 7", seen)
	}
	vid := e.variableIDs()[0]
	m := get(proxy.URL + "/fleet/api/v1.6/variables/" + vid + "/values?page_size=10")
	if l, _ := m["next"].(string); !strings.HasPrefix(l, proxy.URL+"/fleet/api/v1.6/variables/"+vid+"/values?") {
		t.Errorf("values next link %q does not use the public URL", m["next"])
	}
	ev := e.sim.Events()[0].ID
	m = get(proxy.URL + "/fleet/api/v2.0/events/" + ev + "/logs/?page_size=5")
	if l, _ := m["next"].(string); !strings.HasPrefix(l, proxy.URL+"/fleet/api/v2.0/events/"+ev+"/logs/?") {
		t.Errorf("event log next link %q does not use the public URL", m["next"])
	}

	// Without PublicURL the links follow the request's host.
	plain := newEnv(t, Options{Devices: 7, Variables: 1, Points: 30})
	r := plain.get("/api/v2.0/devices/?page_size=2")
	if l, _ := r.json(t)["next"].(string); !strings.HasPrefix(l, plain.srv.URL+"/api/v2.0/devices/?") {
		t.Errorf("without PublicURL next is %q, want it on %s", l, plain.srv.URL)
	}

	// A public URL with a path prefix and a trailing slash, asked for from
	// another host.
	s, err := New(Options{Seed: 1, Devices: 3, Variables: 1, Points: 5, Tokens: []string{"t"}, PublicURL: "https://fleet.example:8443/api-proxy/"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://internal:9000/api/v2.0/devices/?page_size=1", nil)
	req.Header.Set("X-Auth-Token", "t")
	s.ServeHTTP(rec, req)
	var body map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if body["next"] != "https://fleet.example:8443/api-proxy/api/v2.0/devices/?page=2&page_size=1" {
		t.Errorf("next with Options.PublicURL: %v", body["next"])
	}
	for _, bad := range []string{"fleet.example", "ftp://fleet.example", "https://", "https://h/?q=1", "https://h/#f", "http://u:p@h/"} {
		if _, err := New(Options{PublicURL: bad}); err == nil {
			t.Errorf("New accepted the public URL %q", bad)
		}
	}
}
