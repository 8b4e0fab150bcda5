package fleetapi

// The conformance suite runs the client against fleetsim over loopback, one
// test per rule of ../../../shared/spec/fleet-telemetry-api.md, each named
// after the spec's wording. Where the client deliberately has no API for a
// rule (a GET on a POST-only endpoint, a malformed body, a page number), the
// test goes through the client's own request machinery (do, getJSON,
// listPages), so that the error parsing and classification under test are
// the client's.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"

	"github.com/fleetsync/fleetsync/extract/fleetsim/simtest"
)

const (
	tokOrdinary = "tok-ordinary"
	tokOrg      = "tok-org"
	tokAccount  = "tok-account"
)

// seenRequest is one request as the simulator received it.
type seenRequest struct {
	method, path string
	query        url.Values
	token        string
}

// confEnv is a fleetsim served over loopback, with a log of the requests.
type confEnv struct {
	t     testing.TB
	sim   *fleetsim.Sim
	srv   *httptest.Server
	clock *simtest.Clock

	mu   sync.Mutex
	seen []seenRequest
	// after runs after each request is served (for fault switching).
	after func(r *http.Request, status int)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// newConf starts a small fleet (4 devices × 4 variables × 300 points over a
// day) unless opts sizes it; the clock is fake.
func newConf(t testing.TB, opts fleetsim.Options) *confEnv {
	t.Helper()
	e := &confEnv{t: t, clock: simtest.NewClock(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))}
	if opts.Devices == 0 {
		opts.Devices, opts.Variables, opts.Points = 4, 4, 300
	}
	if opts.Seed == 0 {
		opts.Seed = 7
	}
	if opts.Span == 0 {
		opts.Span = 24 * time.Hour
	}
	opts.Tokens = append(opts.Tokens, tokOrdinary)
	opts.OrgTokens = append(opts.OrgTokens, tokOrg)
	opts.AccountTokens = append(opts.AccountTokens, tokAccount)
	if opts.Now == nil {
		opts.Now = e.clock.Now
	}
	sim, err := fleetsim.New(opts)
	if err != nil {
		t.Fatalf("fleetsim.New: %v", err)
	}
	e.sim = sim
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.seen = append(e.seen, seenRequest{method: r.Method, path: r.URL.Path, query: r.URL.Query(), token: r.Header.Get("X-Auth-Token")})
		after := e.after
		e.mu.Unlock()
		sw := &statusRecorder{ResponseWriter: w}
		defer func() {
			if after != nil {
				after(r, sw.status)
			}
		}()
		sim.ServeHTTP(sw, r)
	}))
	t.Cleanup(func() {
		e.srv.Close()
		sim.Close()
	})
	return e
}

func (e *confEnv) requests() []seenRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.seen)
}

func (e *confEnv) resetRequests() {
	e.mu.Lock()
	e.seen = nil
	e.mu.Unlock()
}

// client builds a client with fast retries and the given token source.
func (e *confEnv) client(tokens TokenSource, mod func(*Config)) *Client {
	e.t.Helper()
	cfg := Config{BaseURL: e.srv.URL, Tokens: tokens, Timeout: 5 * time.Second, MaxElapsed: 20 * time.Second,
		BackoffInitial: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond, PageSize: 3}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg, nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *confEnv) ordinary() *Client { return e.client(StaticToken(tokOrdinary), nil) }

func (e *confEnv) nowMs() int64 { return e.clock.Now().UnixMilli() }

// window is a range inside retention covering every generated in-window
// point.
func (e *confEnv) window() (int64, int64) {
	return e.nowMs() - 48*3600*1000, e.nowMs()
}

// variables returns the fleet's variables of a kind, in list order.
func (e *confEnv) variables(kind string) []fleetsim.Variable {
	var out []fleetsim.Variable
	for _, d := range e.sim.Devices() {
		for _, v := range d.Variables {
			if kind == "" || v.Kind == kind {
				out = append(out, v)
			}
		}
	}
	return out
}

// busyVariable is a variable with at least n points in the window.
func (e *confEnv) busyVariable(kind string, n int) fleetsim.Variable {
	lo, hi := e.window()
	for _, v := range e.variables(kind) {
		if len(e.pointsIn(v.ID, lo, hi)) >= n {
			return v
		}
	}
	e.t.Fatalf("no %q variable with %d points", kind, n)
	return fleetsim.Variable{}
}

// pointsIn is the oracle: the simulator's points of a variable in [lo, hi].
func (e *confEnv) pointsIn(id string, lo, hi int64) []fleetsim.SimPoint {
	var out []fleetsim.SimPoint
	for _, p := range e.sim.Points(id) {
		if p.TimestampMs >= lo && p.TimestampMs <= hi {
			out = append(out, p)
		}
	}
	return out
}

// canonical renders a JSON object text or a map with sorted keys.
func canonical(t *testing.T, v any) string {
	t.Helper()
	var m map[string]any
	switch x := v.(type) {
	case string:
		if err := json.Unmarshal([]byte(x), &m); err != nil {
			t.Fatalf("context %q is not a JSON object: %v", x, err)
		}
	case []byte:
		if err := json.Unmarshal(x, &m); err != nil {
			t.Fatalf("context %q is not a JSON object: %v", x, err)
		}
	case map[string]any:
		m = x
	}
	if m == nil {
		m = map[string]any{}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// samePoints compares decoded points with the oracle, order aside, and
// reports the first few differences.
func samePoints(t *testing.T, what string, got []recPoint, want []fleetsim.SimPoint) {
	t.Helper()
	got = slices.Clone(got)
	sort.Slice(got, func(i, j int) bool { return got[i].ts < got[j].ts })
	want = slices.Clone(want)
	sort.Slice(want, func(i, j int) bool { return want[i].TimestampMs < want[j].TimestampMs })
	if len(got) != len(want) {
		t.Errorf("%s: %d points, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := 0; i < min(len(got), len(want)) && bad < 5; i++ {
		g, w := got[i], want[i]
		if g.ts != w.TimestampMs || g.v != w.Value || canonical(t, g.ctx) != canonical(t, w.Context) {
			t.Errorf("%s: point %d is [%d %v %s], want [%d %v %s]", what, i, g.ts, g.v, g.ctx, w.TimestampMs, w.Value, canonical(t, w.Context))
			bad++
		}
	}
}

func apiErr(t *testing.T, err error) *APIError {
	t.Helper()
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("got %v (%T), want an *APIError", err, err)
	}
	return ae
}

// rawCall sends a request through the client's machinery with a body of
// the test's choosing.
func rawCall(ctx context.Context, c *Client, method, prefix, path string, q url.Values, body []byte, out any) error {
	return c.do(ctx, &call{method: method, endpoint: "test", u: c.apiURL(prefix, path, q), body: body, accept: "application/json",
		handle: func(_ *http.Response, r io.Reader) error {
			if out == nil {
				return nil
			}
			return decodeJSON(r, out)
		}})
}

func seriesOf(t *testing.T, c *Client, joined bool, req SeriesRequest) *recorder {
	t.Helper()
	rec := newRecorder()
	var err error
	if joined {
		err = c.SeriesJoined(context.Background(), req, rec)
	} else {
		err = c.Series(context.Background(), req, rec)
	}
	if err != nil {
		t.Fatalf("series (joined=%v): %v", joined, err)
	}
	return rec
}

var bg = context.Background()
