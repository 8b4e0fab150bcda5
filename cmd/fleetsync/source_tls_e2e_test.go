package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

// simHost is the name fleetsim's certificate carries besides 127.0.0.1. It
// resolves nowhere: only the test proxy knows it is 127.0.0.1, so a sync
// that reaches fleetsim by this name went through the proxy. (Go's proxy
// selection, like curl's, never proxies loopback addresses, so the proxy
// test cannot use 127.0.0.1.)
const simHost = "fleetsim.test"

// newHTTPSWorld is a world whose fleetsim is served over HTTPS with a
// certificate for 127.0.0.1 and simHost, made by openssl for the test; the
// configuration reaches it as host and trusts the test CA through
// source.ca_file when withCA.
func newHTTPSWorld(t *testing.T, host string, withCA bool) *world {
	t.Helper()
	w := newWorld(t, worldOpts{})
	certs, err := chserver.MakeCerts(context.Background(), filepath.Join(w.dir, "certs"), simHost)
	if err != nil {
		t.Fatal(err)
	}
	w.serveHTTPS(certs, host, withCA)
	return w
}

// serveHTTPS serves w's fleetsim over HTTPS with the test certificate and
// points the configuration at it as host, trusting the test CA through
// source.ca_file when withCA.
func (w *world) serveHTTPS(certs *chserver.Certs, host string, withCA bool) {
	w.t.Helper()
	cert, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKey)
	if err != nil {
		w.t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(w.sim)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	w.t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	w.editConfig(func(text string) string {
		text = strings.Replace(text, "base_url: "+w.http.URL, "base_url: https://"+net.JoinHostPort(host, port), 1)
		if withCA {
			text = strings.Replace(text, "source:\n", "source:\n  ca_file: "+certs.CAFile+"\n", 1)
		}
		return text
	})
}

func TestSyncFromFleetsimOverHTTPSWithSourceCAFileIsExact(t *testing.T) {
	w := newHTTPSWorld(t, "127.0.0.1", true)
	if code, errs := w.syncWithEnv(nil); code != 0 {
		t.Fatalf("sync over HTTPS with source.ca_file exited %d: %s", code, lastLines(errs, 5))
	}
	n := w.checkOracle()
	t.Logf("%d points synced from fleetsim over HTTPS", n)
}

func TestSyncFromFleetsimOverHTTPSWithoutItsCAFailsAtOnceNamingTheCertificate(t *testing.T) {
	w := newHTTPSWorld(t, "127.0.0.1", false)
	began := time.Now()
	code, errs := w.syncWithEnv(nil)
	last := lastLines(errs, 1)
	// retry_max_elapsed is 20s: an untrusted certificate is not retried.
	if code == 0 || !strings.Contains(last, "certificate signed by unknown authority") || !strings.Contains(last, "set source.ca_file") || time.Since(began) > 15*time.Second {
		t.Fatalf("without source.ca_file: exit %d after %s, last line %q; want a quick failure naming the certificate", code, time.Since(began).Round(time.Millisecond), last)
	}
	t.Logf("exit %d: %s", code, last)
}

// connectProxy is an HTTP CONNECT proxy on loopback that knows simHost as
// 127.0.0.1. It counts the tunnels it opened, records every byte clients
// sent it (to show the token never passed in clear) and refuses, and
// records, anything else: plain HTTP requests and other hosts.
type connectProxy struct {
	ln      net.Listener
	tunnels atomic.Int64
	mu      sync.Mutex
	seen    bytes.Buffer
	refused []string
	conns   sync.WaitGroup
}

func startConnectProxy(t *testing.T) *connectProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &connectProxy{ln: ln}
	var open sync.Map // net.Conn -> struct{}, closed at the end
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Store(c, struct{}{})
			p.conns.Add(1)
			go func() {
				defer p.conns.Done()
				defer open.Delete(c)
				p.serve(c, &open)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		p.conns.Wait()
	})
	return p
}

// recorder copies what a client sends into the proxy's record.
type recorder struct{ p *connectProxy }

func (r recorder) Write(b []byte) (int, error) {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	return r.p.seen.Write(b)
}

func (p *connectProxy) serve(c net.Conn, open *sync.Map) {
	defer c.Close()
	br := bufio.NewReader(io.TeeReader(c, recorder{p}))
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	host, port, _ := net.SplitHostPort(req.Host)
	if req.Method != http.MethodConnect || host != simHost {
		p.mu.Lock()
		p.refused = append(p.refused, req.Method+" "+req.Host)
		p.mu.Unlock()
		_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	open.Store(up, struct{}{})
	defer open.Delete(up)
	defer up.Close()
	p.tunnels.Add(1)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, up)
		c.Close()
		close(done)
	}()
	_, _ = io.Copy(up, br) // the client's bytes, recorded on the way
	up.Close()
	<-done
}

func TestSyncThroughAnHTTPSProxyKeepsTheTokenInsideTheTunnel(t *testing.T) {
	w := newHTTPSWorld(t, simHost, true)
	proxy := startConnectProxy(t)
	env := []string{"HTTPS_PROXY=http://" + proxy.ln.Addr().String(), "NO_PROXY=127.0.0.1,localhost"}
	if code, errs := w.syncWithEnv(env); code != 0 {
		t.Fatalf("sync through the proxy exited %d: %s", code, lastLines(errs, 5))
	}
	n := w.checkOracle()
	proxy.mu.Lock()
	seen, refused := proxy.seen.String(), proxy.refused
	proxy.mu.Unlock()
	t.Logf("%d points synced through %d tunnels; the proxy saw %d bytes from fleetsync", n, proxy.tunnels.Load(), len(seen))
	if proxy.tunnels.Load() == 0 {
		t.Fatalf("the proxy opened no tunnel, yet the sync succeeded")
	}
	if len(refused) > 0 {
		t.Errorf("fleetsync asked the proxy for something other than a tunnel to %s: %q", simHost, refused)
	}
	if strings.Contains(seen, testToken) {
		t.Errorf("the token passed through the proxy in clear")
	}
	if !strings.Contains(seen, "CONNECT "+simHost+":") {
		t.Errorf("the proxy's record lacks the CONNECT line; is it recording at all? first bytes %q", seen[:min(len(seen), 80)])
	}
}

func TestSyncWithoutTheProxyVariablesCannotReachAHostOnlyTheProxyKnows(t *testing.T) {
	w := newHTTPSWorld(t, simHost, true)
	// A name that does not resolve is retried like any failed dial; a
	// short budget gets the test its failure in seconds, not the world's 20.
	w.editConfig(func(text string) string {
		return strings.Replace(text, "retry_max_elapsed: 20s", "retry_max_elapsed: 1s", 1)
	})
	proxy := startConnectProxy(t)
	// NO_PROXY covering the host bypasses the proxy: the name does not
	// resolve, so the sync fails and the proxy saw nothing.
	env := []string{"HTTPS_PROXY=http://" + proxy.ln.Addr().String(), "NO_PROXY=" + simHost}
	code, errs := w.syncWithEnv(env)
	if code == 0 || proxy.tunnels.Load() != 0 {
		t.Fatalf("with NO_PROXY=%s: exit %d, %d tunnels; want a failure and no tunnel: %s", simHost, code, proxy.tunnels.Load(), lastLines(errs, 2))
	}
}
