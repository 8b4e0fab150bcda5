package fleetapi

// Authentication, errors and retention. Each test names the spec rule it
// checks; the harness is in conformance_test.go.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// ---- Authentication ----

func TestSpec_RequestsCarryTheTokenInTheXAuthTokenHeader(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 10)
	lo, hi := e.window()
	_ = c.Devices(bg, func(Device) error { return nil })
	_ = collectValues(t, c, v.ID, ValuesQuery{Start: lo, End: hi})
	_ = collectCSV(t, c, v.ID, ValuesQuery{Start: lo, End: hi})
	_, _, _ = c.Statistic(bg, v.ID, "mean", lo, hi)
	_, _ = c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v.ID}, Aggregation: "max", Start: lo, End: hi})
	_ = seriesOf(t, c, false, SeriesRequest{VariableIDs: []string{v.ID}, Start: lo, End: hi})
	reqs := e.requests()
	if len(reqs) < 6 {
		t.Fatalf("only %d requests", len(reqs))
	}
	for _, r := range reqs {
		if r.token != tokOrdinary || r.query.Has("token") {
			t.Errorf("%s %s: header token %q, query %v", r.method, r.path, r.token, r.query)
		}
	}
}

func TestSpec_MissingEmptyWrongAndExpiredTokensAllGiveTheSame401(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	var bodies []string
	record := func(err error) {
		ae := apiErr(t, err)
		if ae.Status != 401 || ae.Code != CodeUnauthorized || Retryable(err) || !IsUnauthorized(err) {
			t.Errorf("got %+v", ae)
		}
		bodies = append(bodies, fmt.Sprint(ae.Code, ae.Message))
	}
	_, err := e.client(StaticToken("wrong"), nil).Device(bg, e.sim.Devices()[0].ID)
	record(err)
	// A missing header, and an empty ?token= on values: the client never
	// sends either, so a client whose base names another host (and thus
	// withholds the header) sends these requests.
	noTok := e.client(StaticToken(tokOrdinary), nil)
	noTok.base = &url.URL{Scheme: "http", Host: "other.invalid"}
	for _, q := range []url.Values{nil, {"token": {""}}} {
		u, _ := url.Parse(e.srv.URL + "/api/v1.6/variables/" + e.variables("")[0].ID + "/values?" + q.Encode())
		err := noTok.do(bg, &call{method: "GET", endpoint: "test", u: u, handle: func(*http.Response, io.Reader) error { return nil }})
		record(err)
	}
	for _, r := range e.requests() {
		if r.path != "/api/v2.0/devices/"+e.sim.Devices()[0].ID+"/" && r.token != "" {
			t.Errorf("a request meant to be without token carried one")
		}
	}
	e.sim.ExpireTokens()
	_, err = e.ordinary().Device(bg, e.sim.Devices()[0].ID)
	record(err)
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Errorf("401 bodies differ: %q", bodies)
		}
	}
}

func TestSpec_AValidTokenWithoutPermissionGives403DetailWithNoCode(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	_, err := e.ordinary().Organization(bg, e.sim.Organizations()[0].ID)
	ae := apiErr(t, err)
	if ae.Status != 403 || ae.Code != 0 || ae.Detail != "You do not have permission to perform this action." || IsUnauthorized(err) {
		t.Errorf("got %+v", ae)
	}
}

func TestSpec_ATokenIsValidForSixHours(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	d := e.sim.Devices()[0].ID
	e.clock.Advance(6*time.Hour - time.Minute)
	if _, err := c.Device(bg, d); err != nil {
		t.Fatalf("a token younger than 6h was refused: %v", err)
	}
	e.clock.Advance(2 * time.Minute)
	if _, err := c.Device(bg, d); !IsUnauthorized(err) {
		t.Errorf("a token older than 6h: %v, want 401", err)
	}
}

func TestSpec_TokenExpiryMidIterationIsRecoveredByReReadingTheTokenFile(t *testing.T) {
	e := newConf(t, fleetsim.Options{Devices: 10, Variables: 1, Points: 5})
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tokOrdinary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := e.client(FileToken(path), nil) // page size 3: four pages
	var ids []string
	err := c.Devices(bg, func(d Device) error {
		ids = append(ids, d.ID)
		if len(ids) == 4 { // on the second page: the token expires and a fresh one is mounted
			e.sim.ExpireTokens()
			e.sim.AddToken("tok-fresh", fleetsim.TokenOrdinary, 0)
			if err := os.WriteFile(path, []byte("tok-fresh\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("iteration failed after the token expired: %v", err)
	}
	if len(ids) != 10 {
		t.Errorf("%d devices, want 10 (no page lost or repeated)", len(ids))
	}
	reqs := e.requests()
	last := reqs[len(reqs)-1]
	if last.token != "tok-fresh" {
		t.Errorf("the last page was read with %q", last.token)
	}
}

// ---- Errors ----

func TestSpec_MalformedJSONBodyGives400Detail(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	err := rawCall(bg, e.ordinary(), "POST", dataPrefix, "/data/raw/series", nil, []byte(`{"variables": [`), nil)
	ae := apiErr(t, err)
	d, _ := ae.Detail.(string)
	if ae.Status != 400 || ae.Code != 0 || !strings.HasPrefix(d, "JSON parse error - ") || Retryable(err) {
		t.Errorf("got %+v", ae)
	}
}

func TestSpec_FailedFieldValidationGives400001WithDetailKeyedByField(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	_, err := e.ordinary().CreateDeviceGroup(bg, DeviceGroupInput{Label: "no-org"})
	ae := apiErr(t, err)
	detail, ok := ae.Detail.(map[string]any)
	if ae.Status != 400 || ae.Code != CodeValidation || ae.Message != "Validation Error." || !ok || detail["organization"] == nil {
		t.Errorf("got %+v", ae)
	}
}

func TestSpec_InvalidEnumValueOnADataAPIPostGivesDescriptionStatusMessage(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	_, err := e.ordinary().Aggregate(bg, AggregationRequest{VariableIDs: []string{e.variables("")[0].ID}, Aggregation: "variance"})
	ae := apiErr(t, err)
	if ae.Status != 400 || ae.Description != "Bad Request" || !strings.Contains(ae.Message, "mean") {
		t.Errorf("got %+v; the message should list the accepted values", ae)
	}
	if line := err.Error(); !strings.Contains(line, "POST /api/v1.6/data/stats/aggregation/") || !strings.Contains(line, "HTTP 400") {
		t.Errorf("Error() = %q", line)
	}
}

func TestSpec_PageNumberPastTheLastPageGives404InvalidPage(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	err := rawCall(bg, c, "GET", platformPrefix, "/devices/", url.Values{"page": {"99"}}, nil, nil)
	ae := apiErr(t, err)
	if ae.Status != 404 || ae.Code != 0 || ae.Detail != "Invalid page." || !IsNotFound(err) || Retryable(err) {
		t.Errorf("got %+v", ae)
	}
}

func TestSpec_UnknownDeviceOrVariableLabelGives404001(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	d := e.sim.Devices()[0]
	_, err1 := c.Device(bg, "~no-such-device")
	_, err2 := c.DeviceVariable(bg, d.ID, "no-such-variable")
	_, err3 := c.Device(bg, LabelKey(e.sim.Groups()[0].Label)) // a label of another kind: wrong ~ key
	for _, err := range []error{err1, err2, err3} {
		ae := apiErr(t, err)
		if ae.Status != 404 || ae.Code != CodeNotFound || ae.Message != "The request was not found." || Retryable(err) {
			t.Errorf("got %+v", ae)
		}
	}
}

func TestSpec_GetOnAPostOnlyDataAPIEndpointGives405001(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	for _, p := range []string{"/data/raw/series", "/data/stats/aggregation/"} {
		err := rawCall(bg, c, "GET", dataPrefix, p, nil, nil, nil)
		ae := apiErr(t, err)
		if ae.Status != 405 || ae.Code != CodeMethodNotAllowed || ae.Detail == nil || Retryable(err) {
			t.Errorf("GET %s: %+v", p, ae)
		}
	}
}

// ---- Retention ----

func TestSpec_RetentionViolationIsRejectedInFullWith403003OnEveryDataRead(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	c := e.ordinary()
	v := e.busyVariable("temperature", 10)
	floor := e.sim.RetentionFloor().UnixMilli()
	old, now := floor-1000, e.nowMs()
	cases := map[string]func() error{
		"raw series start": func() error {
			return c.Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: old, End: now}, newRecorder())
		},
		"raw series both": func() error {
			return c.Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: old, End: old + 1}, newRecorder())
		},
		"aggregation start": func() error {
			_, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v.ID}, Aggregation: "count", Start: old})
			return err
		},
		"aggregation end": func() error {
			_, err := c.Aggregate(bg, AggregationRequest{VariableIDs: []string{v.ID}, Aggregation: "count", End: old})
			return err
		},
		"statistics": func() error { _, _, err := c.Statistic(bg, v.ID, "count", old, now); return err },
		"values start": func() error {
			return c.Values(bg, v.ID, ValuesQuery{Start: old}, func(Point) error { return nil })
		},
		"values end": func() error {
			return c.Values(bg, v.ID, ValuesQuery{End: old}, func(Point) error { return nil })
		},
		"values both": func() error {
			return c.Values(bg, v.ID, ValuesQuery{Start: old, End: now}, func(Point) error { return nil })
		},
	}
	for name, f := range cases {
		err := f()
		var re *RetentionError
		if !errors.As(err, &re) || re.API.Status != 403 || re.API.Code != CodeRetention || Retryable(err) {
			t.Errorf("%s: got %v, want a permanent *RetentionError (403003)", name, err)
		}
	}
	// Moving the floor forward is enough: the in-window range passes.
	if err := c.Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: floor + 1000, End: now}, newRecorder()); err != nil {
		t.Errorf("in-window range: %v", err)
	}
}

func TestSpec_RetentionViolationInCSVHasACompletelyEmpty403Body(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 10)
	old := e.sim.RetentionFloor().UnixMilli() - 1000
	err := e.ordinary().ValuesCSV(bg, v.ID, ValuesQuery{Start: old}, func(Point) error { return nil })
	var re *RetentionError
	if !errors.As(err, &re) || re.API.Status != 403 || re.API.Code != 0 || re.API.Message != "" {
		t.Errorf("got %v, want a *RetentionError from an empty 403", err)
	}
}

func TestSpec_ASecondsPrecisionTimestampReadsAs1970AndTriggersRetention(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 10)
	secs := e.clock.Now().Add(-time.Hour).Unix()
	err := e.ordinary().Series(bg, SeriesRequest{VariableIDs: []string{v.ID}, Start: secs, End: e.clock.Now().Unix()}, newRecorder())
	if !IsRetention(err) {
		t.Errorf("got %v, want a retention error", err)
	}
}

func TestSpec_DataRetentionWindowIs24MonthsByDefault(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	v := e.busyVariable("temperature", 10)
	now := e.clock.Now()
	c := e.ordinary()
	in := now.Add(-729 * 24 * time.Hour).UnixMilli()
	if _, _, err := c.Statistic(bg, v.ID, "count", in, now.UnixMilli()); err != nil {
		t.Errorf("729 days back: %v", err)
	}
	out := now.Add(-731 * 24 * time.Hour).UnixMilli()
	_, _, err := c.Statistic(bg, v.ID, "count", out, now.UnixMilli())
	var re *RetentionError
	if !errors.As(err, &re) || !strings.Contains(re.API.Message, "24 months") {
		t.Errorf("731 days back: %v, want a 403003 naming the 24-month limit", err)
	}
}

// TestARefusedOrganizationListIsNotAskedForAgainWithTheSameToken: the
// organizations are refused to an ordinary token; asked again with it, the
// client answers the same refusal without a request, and asks afresh once
// the token file holds another token, which may read them.
func TestARefusedOrganizationListIsNotAskedForAgainWithTheSameToken(t *testing.T) {
	e := newConf(t, fleetsim.Options{})
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tokOrdinary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := e.client(FileToken(path), nil)
	orgs := func() (int, error) {
		n := 0
		err := c.Organizations(bg, func(Organization) error { n++; return nil })
		return n, err
	}
	asked := func() int {
		n := 0
		for _, r := range e.requests() {
			if r.path == "/api/v2.0/organizations/" {
				n++
			}
		}
		return n
	}
	for i := range 3 {
		_, err := orgs()
		if ae := apiErr(t, err); ae.Status != 403 || !ae.PermissionDenied() {
			t.Fatalf("read %d with an ordinary token: %v, want the 403 refusal", i+1, err)
		}
	}
	if n := asked(); n != 1 {
		t.Fatalf("the organizations were asked for %d times with one ordinary token, want once", n)
	}
	if err := os.WriteFile(path, []byte(tokOrg+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.RefreshToken(); err != nil {
		t.Fatal(err)
	}
	if n, err := orgs(); err != nil || n == 0 || asked() != 2 {
		t.Fatalf("after a rotation to an organization token: %d organizations, %v, %d requests in all; want them read with a second request", n, err, asked())
	}
}
