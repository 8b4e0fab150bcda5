package fleetapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// shrinkingList serves a page-number list at path whose items change when
// the n-th request for a page after the first arrives (n counts from 1;
// change maps it to the new items). A page past the end answers the
// service's 404 {"detail": "Invalid page."}.
type shrinkingList struct {
	t      *testing.T
	path   string
	mu     sync.Mutex
	items  []string
	change map[int][]string
	later  int // requests for a page after the first
	log    []string
}

func (l *shrinkingList) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != l.path {
		l.t.Errorf("unexpected request %s", r.URL)
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("X-Auth-Token") != secret {
		l.t.Errorf("request %s without the token", r.URL)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	if page == 0 {
		page = 1
	}
	size, _ := strconv.Atoi(r.URL.Query().Get("page_size"))
	if page > 1 {
		l.later++
		if items, ok := l.change[l.later]; ok {
			l.items = items
		}
	}
	l.log = append(l.log, strconv.Itoa(page))
	from := (page - 1) * size
	if page > 1 && from >= len(l.items) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"detail":"Invalid page."}`)
		return
	}
	to := min(from+size, len(l.items))
	var next any
	if to < len(l.items) {
		next = fmt.Sprintf("?page=%d&page_size=%d", page+1, size)
	}
	writeDevicesPage(w, next, l.items[from:to]...)
}

func (l *shrinkingList) pages() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.log, ",")
}

// listWalks are the list walks of the client that restart, each with the
// path it reads.
var listWalks = []struct {
	name string
	path string
	walk func(c *Client, fn func(id string)) error
}{
	{"devices", "/api/v2.0/devices/", func(c *Client, fn func(string)) error {
		return c.Devices(bg, func(d Device) error { fn(d.ID); return nil })
	}},
	{"variables of a device", "/api/v2.0/devices/d1/variables/", func(c *Client, fn func(string)) error {
		return c.Variables(bg, Device{ID: "d1"}, func(v Variable) error { fn(v.ID); return nil })
	}},
	{"variables of the account", "/api/v2.0/variables/", func(c *Client, fn func(string)) error {
		return c.AllVariables(bg, func(v Variable) error { fn(v.ID); return nil })
	}},
	{"device groups", "/api/v2.0/device_groups/", func(c *Client, fn func(string)) error {
		return c.DeviceGroups(bg, func(g DeviceGroup) error { fn(g.ID); return nil })
	}},
	{"dashboards of an organization", "/api/v2.0/organizations/o1/dashboards/", func(c *Client, fn func(string)) error {
		return c.OrganizationDashboards(bg, "o1", func(d Dashboard) error { fn(d.ID); return nil })
	}},
}

func TestListWalkRestartsFromPageOneWhenALaterPageVanishes(t *testing.T) {
	for _, lw := range listWalks {
		t.Run(lw.name, func(t *testing.T) {
			// a is deleted and x added while page 1 is read: the list of 2
			// has no page 2 any more.
			l := &shrinkingList{t: t, path: lw.path, items: []string{"a", "b", "c"},
				change: map[int][]string{1: {"b", "x"}}}
			srv := httptest.NewServer(l)
			defer srv.Close()
			c, logs, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.PageSize = 2 })
			var got []string
			err := lw.walk(c, func(id string) { got = append(got, id) })
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != "a,b,x" {
				t.Errorf("yielded %v, want a,b,x (each once)", got)
			}
			if p := l.pages(); p != "1,2,1" {
				t.Errorf("pages requested %s, want 1,2,1", p)
			}
			assertNoSecret(t, err, logs)
		})
	}
}

func TestListWalkRestartsAtMostThreeTimesThenFailsClearly(t *testing.T) {
	for _, lw := range listWalks[:3] {
		t.Run(lw.name, func(t *testing.T) {
			// Page 1 always links a page 2, which is always gone.
			var mu sync.Mutex
			var pages []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				page := r.URL.Query().Get("page")
				mu.Lock()
				pages = append(pages, page)
				mu.Unlock()
				if page == "" {
					writeDevicesPage(w, "?page=2", "a", "b")
					return
				}
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"detail":"Invalid page."}`)
			}))
			defer srv.Close()
			c, _, _ := newTestClient(t, srv.URL, nil)
			var got []string
			err := lw.walk(c, func(id string) { got = append(got, id) })
			var lc *ListChangedError
			if !errors.As(err, &lc) || lc.Restarts != 3 || lc.Last.Status != 404 {
				t.Fatalf("got %v (%T), want a *ListChangedError after 3 restarts", err, err)
			}
			if IsNotFound(err) || notFoundByMethod(err) {
				t.Errorf("the list's parent exists; the error must not read as a 404: %v", err)
			}
			if !Retryable(err) || !retryableByMethod(err) {
				t.Errorf("a list that kept changing may settle; the error must be retryable: %v", err)
			}
			if !strings.Contains(err.Error(), lw.path) || !strings.Contains(err.Error(), "3 restarts") {
				t.Errorf("error %q does not name the list and the restarts", err)
			}
			if p := strings.Join(pages, ","); p != ",2,,2,,2,,2" {
				t.Errorf("pages requested %q, want 4 passes of page 1 and page 2", p)
			}
			if strings.Join(got, ",") != "a,b" {
				t.Errorf("yielded %v, want a,b once", got)
			}
		})
	}
}

func TestDeviceVariablesFirstPage404MeansTheDeviceIsGone(t *testing.T) {
	for name, body := range map[string]string{
		"unknown object": `{"code":404001,"message":"The request was not found."}`,
		"invalid page":   `{"detail":"Invalid page."}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv, n := fixedServer(t, 404, nil, body)
			c, _, _ := newTestClient(t, srv.URL, nil)
			err := c.Variables(bg, Device{ID: "d1"}, func(Variable) error { return nil })
			if !IsNotFound(err) || !notFoundByMethod(err) || n.Load() != 1 {
				t.Errorf("got %v after %d requests, want a NotFound after 1", err, n.Load())
			}
		})
	}
}

func TestDeviceDeletedWhileItsVariablesArePagedIsGone(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Query().Get("page") == "" {
			writeDevicesPage(w, "?page=2", "v1")
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"code":404001,"message":"The request was not found."}`)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	err := c.Variables(bg, Device{ID: "d1"}, func(Variable) error { return nil })
	if !notFoundByMethod(err) || n.Load() != 2 {
		t.Errorf("got %v after %d requests, want a NotFound after 2 (no restart)", err, n.Load())
	}
}

func TestListWalkYieldsAnObjectOnlyOnceWhenTheListGrowsWhilePaged(t *testing.T) {
	// y is inserted before a while page 1 is read, so b moves to page 2.
	l := &shrinkingList{t: t, path: "/api/v2.0/devices/", items: []string{"a", "b", "c"},
		change: map[int][]string{1: {"y", "a", "b", "c"}}}
	srv := httptest.NewServer(l)
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.PageSize = 2 })
	ids, err := collectDevices(c)
	if err != nil || strings.Join(ids, ",") != "a,b,c" {
		t.Errorf("got %v, %v; want a,b,c", ids, err)
	}
}

func TestListKeySetTellsEveryDistinctKeyApart(t *testing.T) {
	s := newKeySet()
	const n = 200_000
	// Ids that differ in one byte, or only by a prefix or a trailing NUL,
	// are as distinct as any.
	keys := make([]string, 0, n+3)
	for i := range n {
		keys = append(keys, fmt.Sprintf("%024x", i))
	}
	keys = append(keys, "a", "a\x00", "aa")
	for _, k := range keys {
		if !s.add(k) {
			t.Fatalf("key %q taken as yielded before it was added", k)
		}
	}
	for _, k := range keys {
		if s.add(k) {
			t.Fatalf("key %q taken as new when added a second time", k)
		}
	}
	if s.n != len(keys) {
		t.Fatalf("the set counts %d keys for %d added", s.n, len(keys))
	}
}

// TestListKeySetHoldsLessThanTheKeys compares the set's heap with a set of
// the key strings themselves, as listPages kept before: a walk of the
// account's variables holds one entry per variable of the fleet.
func TestListKeySetHoldsLessThanTheKeys(t *testing.T) {
	for _, n := range []int{50_000, 250_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) { testKeySetHeap(t, n) })
	}
}

func testKeySetHeap(t *testing.T, n int) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%024x", i) // the length of a service id
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	hashed := newKeySet()
	for _, k := range keys {
		hashed.add(k)
	}
	hashedBytes := heap() - before
	// The strings are copied, as decoding each page makes new ones.
	before = heap()
	plain := make(map[string]struct{})
	for _, k := range keys {
		plain[strings.Clone(k)] = struct{}{}
	}
	plainBytes := heap() - before
	runtime.KeepAlive(keys)
	runtime.KeepAlive(hashed)
	runtime.KeepAlive(plain)
	t.Logf("%d keys: hashed set %.1f B/key, string set %.1f B/key", n, float64(hashedBytes)/float64(n), float64(plainBytes)/float64(n))
	if hashedBytes*2 > plainBytes {
		t.Errorf("the hashed set takes %d B for %d keys, the string set %d B; want under half", hashedBytes, n, plainBytes)
	}
}

func TestNextLinkToAnotherHostIsFollowedOnTheBaseURL(t *testing.T) {
	for _, prefix := range []string{"", "/fleet"} {
		t.Run("base path "+prefix, func(t *testing.T) {
			var otherHits atomic.Int32
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				otherHits.Add(1)
				if strings.Contains(r.Header.Get("X-Auth-Token")+r.URL.RawQuery, secret) {
					t.Errorf("the token reached the other host")
				}
				writeDevicesPage(w, nil, "stolen")
			}))
			defer other.Close()
			var mu sync.Mutex
			var seen []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s token=%v", r.URL.RequestURI(), r.Header.Get("X-Auth-Token") == secret))
				mu.Unlock()
				switch r.URL.Query().Get("page") {
				case "":
					// The service behind a proxy links its own address,
					// which names neither the proxy nor its prefix.
					writeDevicesPage(w, other.URL+"/api/v2.0/devices/?page=2&page_size=100#frag", "d1")
				case "2":
					writeDevicesPage(w, "http://backend.internal:8000/api/v2.0/devices/?page=3&token=leak", "d2")
				default:
					writeDevicesPage(w, nil, "d3")
				}
			}))
			defer srv.Close()
			c, logs, _ := newTestClient(t, srv.URL+prefix, nil)
			ids, err := collectDevices(c)
			if err != nil || strings.Join(ids, ",") != "d1,d2,d3" {
				t.Fatalf("got %v, %v; want d1,d2,d3", ids, err)
			}
			want := []string{
				prefix + "/api/v2.0/devices/?page_size=100 token=true",
				prefix + "/api/v2.0/devices/?page=2&page_size=100 token=true",
				prefix + "/api/v2.0/devices/?page=3 token=true",
			}
			if strings.Join(seen, "\n") != strings.Join(want, "\n") {
				t.Errorf("requests to the base host\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
			}
			if n := otherHits.Load(); n != 0 {
				t.Errorf("the other host got %d requests", n)
			}
			assertNoSecret(t, err, logs)
		})
	}
}

func TestRedirectToAnotherHostNeverCarriesTheToken(t *testing.T) {
	var otherTokens, baseTokens atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Auth-Token") != "" || strings.Contains(r.URL.RawQuery, secret) {
			otherTokens.Add(1)
		}
		if r.URL.Path == "/bounce" {
			// back to the base host: the token may travel there again
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusTemporaryRedirect)
			return
		}
		_, _ = io.WriteString(w, `{"columns":[["timestamp","v1.value.value"]],"results":[[[1700000000000,1]]]}`)
	}))
	defer other.Close()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Auth-Token") == secret {
			baseTokens.Add(1)
		}
		switch r.URL.Path {
		case "/api/v1.6/data/raw/series":
			http.Redirect(w, r, other.URL+"/series", http.StatusTemporaryRedirect)
		case "/api/v2.0/devices/":
			http.Redirect(w, r, other.URL+"/bounce?to="+srv.URL+"/final", http.StatusFound)
		case "/final":
			writeDevicesPage(w, nil, "d1")
		}
	}))
	defer srv.Close()
	// A caller's HTTP client that follows every redirect: its policy is
	// replaced.
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
	c, logs, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.HTTPClient = hc })
	rec := newRecorder()
	err := c.Series(context.Background(), SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t1}, rec)
	if err != nil || len(rec.frames[0]) != 1 {
		t.Fatalf("series through a 307 to another host: %v, %v", rec, err)
	}
	ids, err := collectDevices(c)
	if err != nil || strings.Join(ids, ",") != "d1" {
		t.Fatalf("devices through a redirect chain: %v, %v", ids, err)
	}
	if n := otherTokens.Load(); n != 0 {
		t.Errorf("the token followed %d redirects to another host", n)
	}
	if n := baseTokens.Load(); n != 3 {
		t.Errorf("the base host saw the token %d times, want 3 (series, devices, and the redirect back)", n)
	}
	assertNoSecret(t, err, logs)
}
