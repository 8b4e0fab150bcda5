package fleetsim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim/simtest"
)

// env is a simulator served over loopback.
type env struct {
	t     *testing.T
	sim   *Sim
	srv   *httptest.Server
	clock *simtest.Clock
}

const testToken = "test-token"

// newEnv starts a small fleet (4 devices × 4 variables × 300 points over a
// day) unless opts says otherwise; the clock is fake and fixed.
func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	clock := simtest.NewClock(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	if opts.Devices == 0 && opts.Variables == 0 && opts.Points == 0 {
		opts.Devices, opts.Variables, opts.Points = 4, 4, 300
	}
	if opts.Seed == 0 {
		opts.Seed = 42
	}
	if opts.Tokens == nil {
		opts.Tokens = []string{testToken}
	}
	if opts.Now == nil {
		opts.Now = clock.Now
	}
	sim, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() {
		srv.Close()
		sim.Close()
	})
	return &env{t: t, sim: sim, srv: srv, clock: clock}
}

// response is what a request got back.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

// do sends a request with the test token in the header unless tok says
// otherwise ("-" sends no header at all).
func (e *env) do(method, path string, body any, tok string) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if tok != "-" {
		req.Header.Set("X-Auth-Token", tok)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) get(path string) response { return e.do("GET", path, nil, testToken) }

func (e *env) post(path string, body any) response { return e.do("POST", path, body, testToken) }

// expect checks the status and, when want is not nil, that the body is
// exactly that JSON value.
func expect(t *testing.T, what string, r response, status int, want any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.status, status, r.body)
	}
	if want == nil {
		return
	}
	wb, _ := json.Marshal(want)
	var a, b any
	_ = json.Unmarshal(wb, &a)
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("%s: body is not JSON: %v: %s", what, err, r.body)
	}
	if !jsonEqual(a, b) {
		t.Fatalf("%s: body\n  %s\nwant\n  %s", what, r.body, wb)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// keys returns the keys of a JSON object in document order.
func keys(t *testing.T, body []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", body)
	}
	var out []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// variableIDs lists every variable id of the fleet in list order.
func (e *env) variableIDs() []string {
	var ids []string
	for _, d := range e.sim.Devices() {
		for _, v := range d.Variables {
			ids = append(ids, v.ID)
		}
	}
	return ids
}

// firstVariable returns the fleet's first device, its first variable, that
// variable's points (oldest first) and the newest of them: where a test adds
// points of its own.
func (e *env) firstVariable() (Device, Variable, []SimPoint, SimPoint) {
	d := e.sim.Devices()[0]
	v := d.Variables[0]
	pts := e.sim.Points(v.ID)
	return d, v, pts, pts[len(pts)-1]
}

// retained returns the oracle's points of a variable inside the retention
// window, newest first.
func (e *env) retained(id string) []SimPoint {
	floor := e.sim.RetentionFloor().UnixMilli()
	all := e.sim.Points(id)
	var out []SimPoint
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].TimestampMs >= floor {
			out = append(out, all[i])
		}
	}
	return out
}
