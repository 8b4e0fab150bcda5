package fleetapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

const secret = "s3cr3t-token-value"

// newTestClient builds a client on srv with fast retries; the observed logs
// are returned for the secret checks.
func newTestClient(t *testing.T, base string, mod func(*Config)) (*Client, *observer.ObservedLogs, *prometheus.Registry) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	cfg := Config{BaseURL: base, Tokens: StaticToken(secret), Timeout: 2 * time.Second, MaxElapsed: 5 * time.Second,
		BackoffInitial: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg, zap.New(core), reg)
	if err != nil {
		t.Fatal(err)
	}
	return c, logs, reg
}

// assertNoSecret fails when the token shows in an error or a log entry.
func assertNoSecret(t *testing.T, err error, logs *observer.ObservedLogs) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("the error carries the token: %v", err)
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, secret) {
			t.Errorf("a log entry carries the token: %s", line)
		}
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				total += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return total
}

func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func writeDevicesPage(w http.ResponseWriter, next any, ids ...string) {
	var res []map[string]any
	for _, id := range ids {
		res = append(res, map[string]any{"id": id, "label": "dev-" + id, "properties": map[string]any{"k": 1}, "tags": []string{"a"},
			"createdAt": "2025-01-02T03:04:05.000000Z", "lastActivity": 1700000000000})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "next": next, "previous": nil, "results": res})
}

func collectDevices(c *Client) ([]string, error) {
	var ids []string
	err := c.Devices(context.Background(), func(d Device) error {
		ids = append(ids, d.ID)
		return nil
	})
	return ids, err
}

func TestClientSendsTheTokenOnlyInTheHeader(t *testing.T) {
	var got http.Header
	var rawQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, rawQuery = r.Header.Clone(), r.URL.RawQuery
		writeDevicesPage(w, nil, "d1")
	}))
	defer srv.Close()
	c, logs, _ := newTestClient(t, srv.URL, nil)
	ids, err := collectDevices(c)
	if err != nil || len(ids) != 1 {
		t.Fatalf("got %v, %v", ids, err)
	}
	if got.Get("X-Auth-Token") != secret {
		t.Errorf("X-Auth-Token = %q", got.Get("X-Auth-Token"))
	}
	if strings.Contains(rawQuery, "token") || strings.Contains(rawQuery, secret) {
		t.Errorf("the query carries the token: %q", rawQuery)
	}
	if ua := got.Get("User-Agent"); !strings.HasPrefix(ua, "fleetsync/") {
		t.Errorf("User-Agent = %q, want fleetsync/<version>", ua)
	}
	assertNoSecret(t, nil, logs)
}

func TestClientRetriesServerErrorsThenSucceeds(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"detail":"boom"}`)
		default:
			writeDevicesPage(w, nil, "d1")
		}
	}))
	defer srv.Close()
	c, logs, reg := newTestClient(t, srv.URL, nil)
	if _, err := collectDevices(c); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 3 {
		t.Errorf("%d requests, want 3", n.Load())
	}
	if got := counterValue(t, reg, "fleetsync_api_retries_total", map[string]string{"endpoint": "devices"}); got != 2 {
		t.Errorf("retries_total{endpoint=devices} = %v, want 2", got)
	}
	if got := counterValue(t, reg, "fleetsync_api_requests_total", map[string]string{"endpoint": "devices", "code": "5xx"}); got != 2 {
		t.Errorf("requests_total{5xx} = %v, want 2", got)
	}
	if got := counterValue(t, reg, "fleetsync_api_requests_total", map[string]string{"endpoint": "devices", "code": "2xx"}); got != 1 {
		t.Errorf("requests_total{2xx} = %v, want 1", got)
	}
	if got := counterValue(t, reg, "fleetsync_api_request_duration_seconds", map[string]string{"endpoint": "devices"}); got != 3 {
		t.Errorf("request_duration_seconds count = %v, want 3", got)
	}
	assertNoSecret(t, nil, logs)
}

// countingBackOff waits wait between attempts and stops after stopAfter
// waits; it counts how many sequences were started and how many waits given.
type countingBackOff struct {
	wait      time.Duration
	stopAfter int
	given     int
}

func (b *countingBackOff) NextBackOff() time.Duration {
	if b.given == b.stopAfter {
		return backoff.Stop
	}
	b.given++
	return b.wait
}

func (b *countingBackOff) Reset() { b.given = 0 }

func TestClientWaitsAsTheHandedInBackoffSays(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	var started []*countingBackOff
	c, _, _ := newTestClient(t, srv.URL, func(cfg *Config) {
		cfg.Backoff = func() backoff.BackOff {
			b := &countingBackOff{wait: time.Millisecond, stopAfter: 2}
			started = append(started, b)
			return b
		}
	})
	_, err := collectDevices(c)
	if err == nil || !strings.Contains(err.Error(), "giving up after 3 attempts") {
		t.Fatalf("got %v, want the call to give up after the backoff's 2 waits (3 attempts)", err)
	}
	if n.Load() != 3 || len(started) != 1 || started[0].given != 2 {
		t.Errorf("%d requests, %d backoff sequences started; want 3 requests from one sequence of 2 waits", n.Load(), len(started))
	}
}

func TestClientDoesNotRetryOtherClientErrors(t *testing.T) {
	srv, n := fixedServer(t, http.StatusNotFound, nil, `{"code":404001,"message":"The request was not found."}`)
	c, _, _ := newTestClient(t, srv.URL, nil)
	_, err := c.Device(context.Background(), "~nope")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeNotFound || ae.Endpoint != "/api/v2.0/devices/~nope/" || ae.Method != "GET" {
		t.Fatalf("got %v", err)
	}
	if Retryable(err) || n.Load() != 1 {
		t.Errorf("a 404 was retried (%d requests) or called retryable", n.Load())
	}
}

// retriedAfter serves the client one answer of status with the
// Retry-After header retryAfter(now) gives, then a page of devices, and
// returns when it sent that answer and when the retry came.
func retriedAfter(t *testing.T, status int, retryAfter func(now time.Time) string) (answered, retried time.Time) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			answered = time.Now()
			w.Header().Set("Retry-After", retryAfter(answered))
			w.WriteHeader(status)
			return
		}
		retried = time.Now()
		writeDevicesPage(w, nil, "d1")
	}))
	c, _, _ := newTestClient(t, srv.URL, nil)
	_, err := collectDevices(c)
	srv.Close() // waits for the handler: its times are read after
	if err != nil {
		t.Fatal(err)
	}
	return answered, retried
}

func TestClientHonoursRetryAfterSeconds(t *testing.T) {
	first, second := retriedAfter(t, http.StatusTooManyRequests, func(time.Time) string { return "1" })
	if gap := second.Sub(first); gap < time.Second {
		t.Errorf("retried %s after a 429 with Retry-After: 1", gap)
	}
}

func TestClientHonoursRetryAfterHTTPDate(t *testing.T) {
	deadline := func(now time.Time) time.Time {
		return now.Add(1500 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	}
	first, second := retriedAfter(t, http.StatusServiceUnavailable, func(now time.Time) string {
		return deadline(now).UTC().Format(http.TimeFormat)
	})
	if d := deadline(first); second.Before(d) {
		t.Errorf("retried at %s, before the Retry-After date %s", second.Format(time.StampMilli), d.Format(time.StampMilli))
	}
}

func TestClientGivesUpWhenRetryAfterPassesTheBudget(t *testing.T) {
	srv, n := fixedServer(t, http.StatusTooManyRequests, http.Header{"Retry-After": {"3600"}}, "")
	c, _, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.MaxElapsed = time.Second })
	start := time.Now()
	_, err := collectDevices(c)
	if err == nil || !Retryable(err) {
		t.Fatalf("got %v, want a retryable error", err)
	}
	if time.Since(start) > 500*time.Millisecond || n.Load() != 1 {
		t.Errorf("waited %s and sent %d requests; a Retry-After past the budget must end the call at once", time.Since(start), n.Load())
	}
}

func TestClientStopsRetryingAtMaxElapsed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.MaxElapsed = 300 * time.Millisecond })
	start := time.Now()
	_, err := collectDevices(c)
	if err == nil || !Retryable(err) {
		t.Fatalf("got %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("retried for %s with a 300ms budget", el)
	}
}

func TestClientStopsRetryingWhenTheContextEnds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.MaxElapsed = time.Hour; cfg.BackoffInitial = 20 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Devices(ctx, func(Device) error { return nil })
	if err == nil {
		t.Fatal("no error")
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("kept retrying %s after the context ended", time.Since(start))
	}
}

func TestClient401ReReadsTheTokenFileAndRetriesOnce(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.Header.Get("X-Auth-Token") != "rotated" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"code":401002,"message":"Incorrect authentication credentials."}`)
			return
		}
		writeDevicesPage(w, nil, "d1")
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := FileToken(path)
	c, _, reg := newTestClient(t, srv.URL, func(cfg *Config) { cfg.Tokens = tf })
	if err := c.RefreshToken(); err != nil {
		t.Fatal(err)
	}
	// Kubernetes rotates the mounted secret in place.
	if err := os.WriteFile(path, []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := collectDevices(c); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 2 {
		t.Errorf("%d requests, want 2 (the 401, then the retry with the re-read token)", n.Load())
	}
	if got := counterValue(t, reg, "fleetsync_api_retries_total", nil); got != 1 {
		t.Errorf("retries_total = %v, want 1", got)
	}
}

func TestClientSecondConsecutive401IsPermanent(t *testing.T) {
	srv, n := fixedServer(t, http.StatusUnauthorized, nil, `{"code":401002,"message":"Incorrect authentication credentials."}`)
	c, logs, _ := newTestClient(t, srv.URL, nil)
	_, err := collectDevices(c)
	if !IsUnauthorized(err) || Retryable(err) {
		t.Fatalf("got %v, want a permanent 401", err)
	}
	if n.Load() != 2 {
		t.Errorf("%d requests, want exactly 2", n.Load())
	}
	assertNoSecret(t, err, logs)
}

func TestClientTimesOutWaitingForHeaders(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			<-r.Context().Done() // never answers the first request
			return
		}
		writeDevicesPage(w, nil, "d1")
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.Timeout = 100 * time.Millisecond })
	if _, err := collectDevices(c); err != nil {
		t.Fatalf("the timed-out request was not retried: %v", err)
	}
	if n.Load() != 2 {
		t.Errorf("%d requests, want 2", n.Load())
	}
}

func TestClientTimeoutIsATransportError(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"count":1,"next":null,"results":[`)
		w.(http.Flusher).Flush()
		select { // stalls mid-body
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c, logs, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.Timeout = 100 * time.Millisecond; cfg.MaxElapsed = 250 * time.Millisecond })
	_, err := collectDevices(c)
	var te *TransportError
	if !errors.As(err, &te) || !te.Timeout || !Retryable(err) {
		t.Fatalf("got %v, want a retryable timeout", err)
	}
	assertNoSecret(t, err, logs)
}

// cutServer answers with a Content-Length larger than what it sends, then
// closes the connection: a body cut mid-stream.
func cutServer(t *testing.T, full string, cutAt int, cuts int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if int(n.Add(1)) > cuts {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, full)
			return
		}
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		conn, buf, _ := hj.Hijack()
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(full), full[:cutAt])
		_ = buf.Flush()
	}))
	return srv, &n
}

func TestClientRetriesAPageWhoseBodyWasCut(t *testing.T) {
	full := `{"count":2,"next":null,"previous":null,"results":[{"id":"d1"},{"id":"d2"}]}`
	srv, n := cutServer(t, full, 40, 1)
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	ids, err := collectDevices(c)
	if err != nil || strings.Join(ids, ",") != "d1,d2" {
		t.Fatalf("got %v, %v", ids, err)
	}
	if n.Load() != 2 {
		t.Errorf("%d requests, want 2", n.Load())
	}
}

func TestSeriesCutAfterDeliveryIsReturnedRetryable(t *testing.T) {
	full := `{"columns":[["timestamp","v1.value.value"]],"results":[[[1700000000000,1],[1700000001000,2]]]}`
	srv, n := cutServer(t, full, len(full)-20, 1)
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	rec := newRecorder()
	err := c.Series(context.Background(), SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t1, Limit: 10}, rec)
	var te *TransportError
	if !errors.As(err, &te) || !Retryable(err) {
		t.Fatalf("got %v (%T), want a retryable *TransportError", err, err)
	}
	if n.Load() != 1 {
		t.Errorf("%d requests: a series that reached the sink must not be retried inside the client", n.Load())
	}
	if len(rec.frames[0]) != 1 {
		t.Errorf("the sink saw %d points before the cut, want 1 (partial, for the caller to discard)", len(rec.frames[0]))
	}
}

func TestSeriesCutBeforeDeliveryIsRetried(t *testing.T) {
	full := `{"columns":[["timestamp","v1.value.value"]],"results":[[[1700000000000,1],[1700000001000,2]]]}`
	srv, n := cutServer(t, full, 20, 1)
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	rec := newRecorder()
	err := c.Series(context.Background(), SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t1, Limit: 10}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 2 || len(rec.frames[0]) != 2 {
		t.Errorf("%d requests, %d points; want 2 and 2", n.Load(), len(rec.frames[0]))
	}
}

func TestSeriesSendsBothBoundsColumnsAndLimit(t *testing.T) {
	var body map[string]any
	var path, method string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, method = r.URL.Path, r.Method
		_ = json.NewDecoder(r.Body).Decode(&body)
		_, _ = io.WriteString(w, `{"columns":[["timestamp","a.value.value"],["timestamp","b.value.value"]],"results":[[],[]]}`)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL+"/prefix/", nil)
	req := SeriesRequest{VariableIDs: []string{"a", "b"}, Start: t0, End: t2, Limit: 500}
	if err := c.Series(context.Background(), req, newRecorder()); err != nil {
		t.Fatal(err)
	}
	want := `{"columns":["timestamp","value.value","value.context"],"end":1700000002000,"join_dataframes":false,"limit":500,"start":1700000000000,"variables":["a","b"]}`
	if got, _ := json.Marshal(body); string(got) != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	if method != "POST" || path != "/prefix/api/v1.6/data/raw/series" {
		t.Errorf("%s %s", method, path)
	}
}

func TestPaginationFollowsNextVerbatimAndKeepsTheTokenOnTheBaseHost(t *testing.T) {
	var otherHits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		writeDevicesPage(w, nil, "dX")
	}))
	defer other.Close()
	var seen []string
	var mu sync.Mutex
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.RequestURI()+" token="+fmt.Sprint(r.Header.Get("X-Auth-Token") == secret))
		mu.Unlock()
		switch r.URL.Query().Get("cursor") {
		case "":
			// relative link with an opaque cursor and a token parameter that must be dropped
			writeDevicesPage(w, "/api/v2.0/devices/?cursor=b%2Fx%3D%3D&token=leak&page_size=2", "d1")
		case "b/x==":
			writeDevicesPage(w, srv.URL+"/api/v2.0/devices/?cursor=abs", "d2")
		case "abs":
			// a link naming another host (a proxy's backend): its path and
			// query are followed on the base URL
			writeDevicesPage(w, other.URL+"/elsewhere/?cursor=z", "d3")
		case "z":
			writeDevicesPage(w, nil, "d4")
		}
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	ids, err := collectDevices(c)
	if err != nil || strings.Join(ids, ",") != "d1,d2,d3,d4" {
		t.Fatalf("got %v, %v", ids, err)
	}
	want := []string{
		"/api/v2.0/devices/?page_size=100 token=true",
		"/api/v2.0/devices/?cursor=b%2Fx%3D%3D&page_size=2 token=true",
		"/api/v2.0/devices/?cursor=abs token=true",
		"/elsewhere/?cursor=z token=true",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the other host got %d requests; a next link naming it must be followed on the base URL", n)
	}
}

func TestPaginationToleratesCountAsBooleanOrMissing(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("page") == "" {
			_, _ = io.WriteString(w, `{"count":true,"next":"?page=2","previous":null,"results":[{"id":"d1"}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"next":null,"results":[{"id":"d2"}]}`)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	ids, err := collectDevices(c)
	if err != nil || strings.Join(ids, ",") != "d1,d2" {
		t.Fatalf("got %v, %v", ids, err)
	}
}

func TestPaginationRefusesALinkBackToAPageAlreadyRead(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.WriteString(w, `{"count":1,"next":"/api/v2.0/devices/?page=2","results":[{"id":"d1"}]}`)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	_, err := collectDevices(c)
	if err == nil || !strings.Contains(err.Error(), "already read") || n.Load() != 2 {
		t.Fatalf("got %v after %d requests", err, n.Load())
	}
}

func TestRedirectToAnotherHostDropsTheToken(t *testing.T) {
	var otherToken atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherToken.Store(r.Header.Get("X-Auth-Token"))
		writeDevicesPage(w, nil, "d1")
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/x", http.StatusFound)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	if _, err := collectDevices(c); err != nil {
		t.Fatal(err)
	}
	if tok := otherToken.Load(); tok != "" {
		t.Errorf("the token followed a redirect to another host: %q", tok)
	}
}

func TestClientLimitsTheRequestRate(t *testing.T) {
	var times []time.Time
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		writeDevicesPage(w, nil, "d1")
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.RequestsPerSecond = 20 })
	for range 5 {
		if _, err := collectDevices(c); err != nil {
			t.Fatal(err)
		}
	}
	if span := times[4].Sub(times[0]); span < 190*time.Millisecond {
		t.Errorf("5 requests at 20/s took %s, want at least 200ms", span)
	}
}

func TestClientReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeDevicesPage(w, nil, "d1")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	for range 20 {
		if _, err := collectDevices(c); err != nil {
			t.Fatal(err)
		}
	}
	if conns.Load() != 1 {
		t.Errorf("20 sequential requests opened %d connections, want 1", conns.Load())
	}
}

func TestConnectionFailureIsATransportErrorWithoutTheQuery(t *testing.T) {
	// Port 1 (tcpmux): nothing listens there, and it is below the kernel's
	// ephemeral range. A port freed by closing a listener on :0 is not
	// safe: under load another process can bind it again, or the client's
	// own connection can take it as its source port and connect to itself.
	addr := "127.0.0.1:1"
	c, logs, _ := newTestClient(t, "http://"+addr, func(cfg *Config) { cfg.MaxElapsed = 100 * time.Millisecond })
	_, err := collectDevices(c)
	var te *TransportError
	if !errors.As(err, &te) || !Retryable(err) {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "page_size") {
		t.Errorf("the error repeats the query: %v", err)
	}
	assertNoSecret(t, err, logs)
}

func TestNewRejectsBadConfig(t *testing.T) {
	cases := []Config{
		{Tokens: StaticToken("x")},
		{BaseURL: "ftp://x", Tokens: StaticToken("x")},
		{BaseURL: "http://user:pw@x", Tokens: StaticToken("x")},
		{BaseURL: "http://x"},
		{BaseURL: "http://x", Tokens: StaticToken("x"), Timeout: -1},
	}
	for _, cfg := range cases {
		if _, err := New(cfg, nil, nil); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if _, err := New(Config{BaseURL: "http://x", Tokens: StaticToken("x")}, nil, nil); err != nil {
		t.Errorf("a minimal config was rejected: %v", err)
	}
}

func TestTwoClientsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, err := New(Config{BaseURL: "http://x", Tokens: StaticToken("x")}, nil, reg); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFileTokenReReadsOnlyAfterInvalidateOrRefresh(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("  one\n")
	tf := FileToken(path)
	get := func() string {
		tok, err := tf.Token()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if get() != "one" {
		t.Fatal("first read")
	}
	write("two")
	if got := get(); got != "one" {
		t.Errorf("re-read without cause: %q", got)
	}
	tf.Invalidate()
	if got := get(); got != "two" {
		t.Errorf("after Invalidate: %q, want two", got)
	}
	write("three")
	if err := tf.Refresh(); err != nil || get() != "three" {
		t.Errorf("after Refresh: %v", err)
	}
	write("")
	if err := tf.Refresh(); err == nil || strings.Contains(err.Error(), "three") {
		t.Errorf("an empty file: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := tf.Token(); err == nil {
		t.Error("a missing file gave a token")
	}
}

func TestStaticTokenRejectsEmpty(t *testing.T) {
	if _, err := StaticToken("").Token(); err == nil {
		t.Error("empty static token accepted")
	}
}

func TestLimiterSpacesRequestsAtTheCapAndIsUnlimitedWithoutOne(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	l := newLimiter(10, 0, clock, nil)
	// With a frozen clock every Wait past the first would block; check the
	// reservations instead.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a second immediate Wait must block (got %v)", err)
	}
	now = now.Add(time.Second)
	if err := l.Wait(context.Background()); err != nil {
		t.Errorf("after the interval: %v", err)
	}
	free := newLimiter(0, 0, clock, nil)
	for i := range 100 {
		if at, _ := free.reserve(); !at.Equal(now) {
			t.Fatalf("without a cap, request %d was scheduled %s ahead", i+1, at.Sub(now))
		}
	}
}
