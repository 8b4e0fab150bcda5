package fleetapi

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// These tests pin what lets the pipeline confine a failed multi-variable
// raw-series request to the variable that caused it: VariableIndex on a
// frame the decoder refused or a rejection naming one variable, and
// VariableScoped on the other permanent 4xx.

// fixedServer answers every request with status and body, counting them.
func fixedServer(t *testing.T, status int, header http.Header, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		for k, v := range header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// variableIndex is what the pipeline's engine sees of err.
func variableIndex(err error) (int, bool) {
	var ve variableError
	if !errors.As(err, &ve) {
		return 0, false
	}
	return ve.VariableIndex(), true
}

var req3 = SeriesRequest{VariableIDs: []string{"va", "vb", "vc"}, Start: t0, End: t0 + 10_000, Limit: 100}

const cols3 = `[["timestamp","va.value.value","va.value.context"],["timestamp","vb.value.value","vb.value.context"],["timestamp","vc.value.value","vc.value.context"]]`

func TestSeriesUndecodableFrameIsAVariableErrorNamingTheVariableAndWindow(t *testing.T) {
	good := `[[1700000000000,1,{}]]`
	frames := func(i int, bad string) string {
		f := []string{good, good, good}
		f[i] = bad
		return `{"columns":` + cols3 + `,"results":[` + strings.Join(f, ",") + `]}`
	}
	joined := func(row string) string {
		return `{"columns":["timestamp","va.value.value","va.value.context","vb.value.value","vb.value.context","vc.value.value","vc.value.context"],"results":[` + row + `]}`
	}
	cases := []struct {
		name   string
		body   string
		joined bool
		index  int
		says   string
	}{
		{name: "string value", body: frames(1, `[[1700000000000,"n/a",{}]]`), index: 1, says: `the string "n/a"`},
		{name: "timestamp out of range", body: frames(2, `[[1e30,1,{}]]`), index: 2, says: "1e30 is out of range"},
		{name: "timestamp outside the window", body: frames(0, `[[1800000000000,1,{}]]`), index: 0, says: "outside the requested range"},
		{name: "malformed context", body: frames(1, `[[1700000000000,1,{"a":}]]`), index: 1, says: "where a value should start"},
		{name: "context not an object", body: frames(2, `[[1700000000000,1,"x"]]`), index: 2, says: "must be an object"},
		{name: "object value", body: frames(1, `[[1700000000000,{"v":1},{}]]`), index: 1, says: "found an object"},
		{name: "row longer than its columns", body: frames(2, `[[1700000000000,1,{},4]]`), index: 2, says: "4 cells"},
		{name: "frame not an array", body: frames(1, `5`), index: 1, says: "expected '['"},
		{name: "joined string value", joined: true, index: 2,
			body: joined(`[1700000000000,1,{},null,null,"n/a",{}]`), says: `the string "n/a"`},
		{name: "joined malformed context", joined: true, index: 1,
			body: joined(`[1700000000000,1,{},2,{"a":tru},null,null]`), says: "invalid literal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := fixedServer(t, 200, nil, tc.body)
			c, logs, _ := newTestClient(t, srv.URL, nil)
			series := c.Series
			if tc.joined {
				series = c.SeriesJoined
			}
			err := series(bg, req3, newRecorder())
			if err == nil {
				t.Fatal("no error")
			}
			got, ok := variableIndex(err)
			if !ok || got != tc.index {
				t.Errorf("VariableIndex() = %d (implemented %v), want %d: %v", got, ok, tc.index, err)
			}
			msg := err.Error()
			id := req3.VariableIDs[tc.index]
			for _, want := range []string{"variable " + id, strconv.FormatInt(req3.Start, 10), strconv.FormatInt(req3.End, 10), tc.says} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			if Retryable(err) || retryableByMethod(err) || n.Load() != 1 {
				t.Errorf("a refused frame must be permanent and not retried: %d requests, %v", n.Load(), err)
			}
			assertNoSecret(t, err, logs)
		})
	}
}

func TestSeriesFailureOfTheWholeResponseIsTiedToNoVariable(t *testing.T) {
	cases := map[string]string{
		"broken envelope":         `{"columns":` + cols3 + `,"results":[[],[],[]],}`,
		"envelope not an object":  `[1,2,3]`,
		"more frames than asked":  `{"columns":` + cols3 + `,"results":[[],[],[],[]]}`,
		"fewer frames than asked": `{"columns":` + cols3 + `,"results":[[],[]]}`,
		"no columns":              `{"results":[[],[],[]]}`,
		"frames in another order": `{"columns":[["timestamp","vb.value.value"],["timestamp","va.value.value"],["timestamp","vc.value.value"]],"results":[[],[],[]]}`,
		"joined timestamp not a number": `{"columns":["timestamp","va.value.value","vb.value.value","vc.value.value"],
			"results":[["x",1,2,3]]}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			srv, _ := fixedServer(t, 200, nil, body)
			c, _, _ := newTestClient(t, srv.URL, nil)
			series := c.Series
			if strings.HasPrefix(name, "joined") {
				series = c.SeriesJoined
			}
			err := series(bg, req3, newRecorder())
			if err == nil {
				t.Fatal("no error")
			}
			if got, ok := variableIndex(err); ok && got != -1 {
				t.Errorf("VariableIndex() = %d, want -1: %v", got, err)
			}
		})
	}
}

func TestSeriesBodyCutInsideAFrameIsTiedToNoVariable(t *testing.T) {
	body := `{"columns":` + cols3 + `,"results":[[[1700000000000,1,{}]],[[1700000000000,1,{"a":"`
	err := DecodeSeries(strings.NewReader(body), req3, newRecorder())
	if got, ok := variableIndex(err); !ok || got != -1 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a body cut in frame 1 directly: VariableIndex() = %d (%v), want -1: %v", got, ok, err)
	}
	// Through the client, the cut is a TransportError wrapping that
	// DecodeError; errors.As must stop at the transport failure.
	full := `{"columns":` + cols3 + `,"results":[[[1700000000000,1,{}]],[[1700000000000,1,{"a":"bbbbbbbbbbbbbbbbbbbb"}]],[]]}`
	srv, _ := cutServer(t, full, len(full)-15, 100)
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	err = c.Series(bg, req3, newRecorder())
	var te *TransportError
	if !errors.As(err, &te) || !retryableByMethod(err) {
		t.Fatalf("got %v (%T), want a retryable *TransportError", err, err)
	}
	if got, ok := variableIndex(err); !ok || got != -1 {
		t.Errorf("a cut body through the client: VariableIndex() = %d (%v), want -1: %v", got, ok, err)
	}
}

func TestAPIErrorVariableScoped(t *testing.T) {
	cases := []struct {
		status int
		body   string
		scoped bool
	}{
		{400, `{"code":400001,"message":"Validation Error.","detail":{"variables":["bad"]}}`, true},
		{400, `{"description":"Bad Request","status":400,"message":"x"}`, true},
		{403, `{"detail":"You do not have permission to perform this action."}`, true},
		{404, `{"code":404001,"message":"The request was not found."}`, true},
		{405, `{"code":405001,"message":"Method not allowed."}`, true},
		{409, ``, true},
		{413, ``, true},
		{422, ``, true},
		{423, `{"detail":"Device disabled."}`, true},
		{401, `{"code":401002,"message":"Incorrect authentication credentials."}`, false},
		{402, `{"detail":"Payment required."}`, false},
		{407, ``, false},
		{408, ``, false},
		{420, `{"detail":"API limit exceeded"}`, false},
		{429, ``, false},
		{403, `{"code":403003,"message":"Time range older than 24 months."}`, false},
		{500, ``, false},
		{502, ``, false},
		{503, ``, false},
		{302, ``, false},
	}
	for _, tc := range cases {
		e := ParseError(tc.status, []byte(tc.body))
		if got := e.VariableScoped(); got != tc.scoped {
			t.Errorf("HTTP %d %s: VariableScoped() = %v, want %v", tc.status, tc.body, got, tc.scoped)
		}
		if got := scopedByMethod(e); got != tc.scoped {
			t.Errorf("HTTP %d %s: IsScoped (as the pipeline reads it) = %v, want %v", tc.status, tc.body, got, tc.scoped)
		}
	}
	// The retention rejection of CSV has an empty 403 body and no code.
	re := &RetentionError{API: ParseError(403, nil)}
	if scopedByMethod(re) {
		t.Error("a retention rejection with an empty body is scoped")
	}
}

func TestSeriesScopedRejectionIsNotRetried(t *testing.T) {
	srv, n := fixedServer(t, 423, nil, `{"detail":"Device disabled."}`)
	c, _, _ := newTestClient(t, srv.URL, nil)
	err := c.Series(bg, req3, newRecorder())
	if !scopedByMethod(err) || retryableByMethod(err) || n.Load() != 1 {
		t.Errorf("423: scoped %v, retryable %v, %d requests; want scoped, permanent, 1 request: %v",
			scopedByMethod(err), retryableByMethod(err), n.Load(), err)
	}
	if got, ok := variableIndex(err); !ok || got != -1 {
		t.Errorf("a body naming no variable: VariableIndex() = %d (%v), want -1", got, ok)
	}
}

func TestClientRetries420LikeA429HonouringRetryAfter(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(StatusAPILimitExceeded)
			_, _ = io.WriteString(w, `{"detail":"API limit exceeded"}`)
			return
		}
		writeDevicesPage(w, nil, "d1")
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	start := time.Now()
	ids, err := collectDevices(c)
	if err != nil || strings.Join(ids, ",") != "d1" || n.Load() != 2 {
		t.Fatalf("got %v, %v after %d requests; want d1 after 2", ids, err, n.Load())
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("retried after %s, want the 1s of Retry-After", waited)
	}
	e := ParseError(StatusAPILimitExceeded, nil)
	if !e.Retryable() || !Retryable(e) || e.VariableScoped() {
		t.Errorf("420: Retryable %v, VariableScoped %v; want retryable and not scoped", e.Retryable(), e.VariableScoped())
	}
}

func TestClientRetriesAnUnsafeRequestAfter420(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(StatusAPILimitExceeded)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	u := c.apiURL(platformPrefix, "/device_groups/", nil)
	err := c.do(bg, &call{method: http.MethodPost, endpoint: "test", u: u, body: []byte(`{}`), unsafe: true,
		handle: func(*http.Response, io.Reader) error { return nil }})
	if err != nil || n.Load() != 2 {
		t.Errorf("got %v after %d requests, want success after 2", err, n.Load())
	}
}

func TestSeriesRejectionNamingOneVariableIsAVariableError(t *testing.T) {
	ids := []string{"5f1a", "v1", "v10", "a-b"}
	req := SeriesRequest{VariableIDs: ids, Start: t0, End: t0 + 10_000, Limit: 100}
	cases := []struct {
		name   string
		status int
		body   string
		index  int
	}{
		{"validation detail keyed by field", 400,
			`{"code":400001,"message":"Validation Error.","detail":{"variables":["Variable 5f1a is not numeric."]}}`, 0},
		{"detail as a string", 404, `{"detail":"Variable v10 was not found."}`, 2},
		{"detail keyed by the id", 400, `{"code":400001,"message":"Validation Error.","detail":{"a-b":["invalid"]}}`, 3},
		{"schema validation message", 400, `{"description":"Bad Request","status":400,"message":"variables[1] (v1) is invalid"}`, 1},
		{"text body", 403, `variable v1: permission denied`, 1},
		{"an id only inside a longer word", 400, `{"detail":"variable v1x and 5f1ab and xa-b are bad"}`, -1},
		{"two variables", 400, `{"detail":["v1 is bad","so is v10"]}`, -1},
		{"no variable", 400, `{"detail":"JSON parse error - Expecting value"}`, -1},
		{"not scoped", 402, `{"detail":"Payment required for v1"}`, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := fixedServer(t, tc.status, nil, tc.body)
			c, _, _ := newTestClient(t, srv.URL, nil)
			err := c.Series(bg, req, newRecorder())
			var ae *APIError
			if !errors.As(err, &ae) || ae.Status != tc.status {
				t.Fatalf("got %v (%T), want an *APIError with status %d", err, err, tc.status)
			}
			if got, ok := variableIndex(err); !ok || got != tc.index {
				t.Errorf("VariableIndex() = %d (implemented %v), want %d: %v", got, ok, tc.index, err)
			}
			if scoped := tc.status != 402; scopedByMethod(err) != scoped {
				t.Errorf("IsScoped (as the pipeline reads it) = %v, want %v", !scoped, scoped)
			}
			if n.Load() != 1 {
				t.Errorf("%d requests, want 1", n.Load())
			}
		})
	}
}

func TestRejectionOfAnotherReadNamesNoVariable(t *testing.T) {
	srv, _ := fixedServer(t, 404, nil, `{"detail":"Variable v1 was not found."}`)
	c, _, _ := newTestClient(t, srv.URL, nil)
	_, err := c.Variable(bg, "v1")
	if got, ok := variableIndex(err); !ok || got != -1 {
		t.Errorf("VariableIndex() = %d (%v) outside a raw-series read, want -1", got, ok)
	}
}

func TestNamedVariable(t *testing.T) {
	ids := []string{"v1", "v10", "", "v1"}
	for body, want := range map[string]int{
		`{"detail":"v10"}`:         1,
		`{"detail":{"v10":["x"]}}`: 1,
		`{"detail":"v1"}`:          -1, // requested twice: ambiguous
		`{"detail":"nothing"}`:     -1,
		`v10.value.value`:          1,
		`{"a":[{"b":"(v10)"}]}`:    1,
		`{"a":"v\u00310"}`:         1,
	} {
		if got := namedVariable([]byte(body), ids); got != want {
			t.Errorf("namedVariable(%s) = %d, want %d", body, got, want)
		}
	}
}
