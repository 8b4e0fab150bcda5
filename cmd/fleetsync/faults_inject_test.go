package main

// The fault suite's interposers, which every world of the harness
// (harness_test.go) has at hand: a gate in front of fleetsim that can hold
// one request (to kill fleetsync while it waits) or hand every request to
// a test's hook first, and a TCP proxy in front of ClickHouse that can
// hold one statement (to kill fleetsync mid-INSERT or just before it
// commits its marks). See docs/reliability.md.

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// heavyFaults reports whether the heavier fault variants run
// (FLEETSYNC_FAULTS_HEAVY=1, set by `make test-faults`).
func heavyFaults() bool { return os.Getenv("FLEETSYNC_FAULTS_HEAVY") == "1" }

// gate passes requests to fleetsim and can hold one chosen request: before
// its response starts, or after part of its body has gone out. A held
// request ends when it is released or its client goes away. A hook, when
// set, sees every request first and passes it on (or not).
type gate struct {
	next http.Handler
	mu   sync.Mutex
	arm  *hold
	all  []*hold
	hook func(w http.ResponseWriter, r *http.Request, next http.Handler)
}

// catch is what a hold of the gate and one of the proxy share: caught is
// closed once it caught its request or statement, release once the test
// freed it.
type catch struct {
	caught, release chan struct{}
	once            sync.Once
	// kind and place say what it waits for and where, for await.
	kind, place string
}

func (c *catch) init(kind, place string) {
	c.caught, c.release, c.kind, c.place = make(chan struct{}), make(chan struct{}), kind, place
}

// free ends the hold: the gate serves its request, the proxy closes its
// connection (forwarding nothing more of the statement).
func (c *catch) free() { c.once.Do(func() { close(c.release) }) }

// await waits until the hold caught its request or statement.
func (c *catch) await(t testing.TB, within time.Duration, what string) {
	t.Helper()
	select {
	case <-c.caught:
	case <-time.After(within):
		t.Fatalf("no %s for %s reached %s within %s", c.kind, what, c.place, within)
	}
}

// hold is one armed or caught request.
type hold struct {
	catch
	match func(*http.Request) bool
	// afterBytes < 0 holds before the response; otherwise after that many
	// body bytes were sent.
	afterBytes int
}

// holdNext arms the gate for the next request match accepts.
func (g *gate) holdNext(afterBytes int, match func(*http.Request) bool) *hold {
	h := &hold{match: match, afterBytes: afterBytes}
	h.init("request", "fleetsim")
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arm, g.all = h, append(g.all, h)
	return h
}

// setHook makes hook see every request before the gate passes it on; nil
// removes it.
func (g *gate) setHook(hook func(w http.ResponseWriter, r *http.Request, next http.Handler)) {
	g.mu.Lock()
	g.hook = hook
	g.mu.Unlock()
}

// releaseAll disarms the gate and releases every held request.
func (g *gate) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arm = nil
	for _, h := range g.all {
		h.free()
	}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	hook := g.hook
	g.mu.Unlock()
	if hook != nil {
		hook(w, r, http.HandlerFunc(g.pass))
		return
	}
	g.pass(w, r)
}

// pass holds r when it is the armed request, then serves it.
func (g *gate) pass(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	h := g.arm
	if h != nil && h.match(r) {
		g.arm = nil
	} else {
		h = nil
	}
	g.mu.Unlock()
	if h == nil {
		g.next.ServeHTTP(w, r)
		return
	}
	if h.afterBytes < 0 {
		close(h.caught)
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		g.next.ServeHTTP(w, r)
		return
	}
	g.next.ServeHTTP(&holdingWriter{ResponseWriter: w, h: h, ctx: r.Context()}, r)
}

// holdingWriter stops a response after h.afterBytes body bytes.
type holdingWriter struct {
	http.ResponseWriter
	h    *hold
	ctx  context.Context
	sent int
	held bool
}

func (hw *holdingWriter) Write(b []byte) (int, error) {
	if !hw.held && hw.sent+len(b) >= hw.h.afterBytes {
		n := hw.h.afterBytes - hw.sent
		if _, err := hw.ResponseWriter.Write(b[:n]); err != nil {
			return 0, err
		}
		hw.Flush()
		hw.held = true
		close(hw.h.caught)
		select {
		case <-hw.h.release:
		case <-hw.ctx.Done():
			return n, hw.ctx.Err()
		}
		m, err := hw.ResponseWriter.Write(b[n:])
		return n + m, err
	}
	hw.sent += len(b)
	return hw.ResponseWriter.Write(b)
}

func (hw *holdingWriter) Flush() {
	if f, ok := hw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// isPath matches requests by method and path prefix.
func isPath(method, prefix string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == method && strings.HasPrefix(r.URL.Path, prefix) }
}

// chProxy forwards TCP connections to ClickHouse and can hold the client's
// stream at the statement that contains a marker: before forwarding it, or
// after forwarding it and half of the next packet (the INSERT's data).
type chProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	arm   *stmtHold
	holds []*stmtHold
	conns []net.Conn
}

// stmtHold is an armed or caught statement hold.
type stmtHold struct {
	catch
	marker []byte
	// midData forwards the statement and the start of its data first.
	midData bool
	// skip lets that many matching statements pass before the hold.
	skip int
}

func startCHProxy(t testing.TB, target string) *chProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &chProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *chProxy) addr() string { return p.ln.Addr().String() }

func (p *chProxy) close() {
	p.ln.Close()
	p.dropHeld()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// dropHeld disarms the proxy and closes every held connection.
func (p *chProxy) dropHeld() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arm = nil
	for _, h := range p.holds {
		h.free()
	}
}

// holdStatement arms the proxy for the statement containing marker that
// comes after skip others containing it.
func (p *chProxy) holdStatement(marker string, midData bool, skip int) *stmtHold {
	h := &stmtHold{marker: []byte(marker), midData: midData, skip: skip}
	h.init("statement", "the ClickHouse proxy")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arm, p.holds = h, append(p.holds, h)
	return h
}

func (p *chProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(c, s); c.Close() }()
		go p.forward(c, s)
	}
}

// midDataBytes is how much of an INSERT's stream (statement and data) a
// mid-data hold lets through: the statement and the start of its block.
const midDataBytes = 4096

// forward copies client bytes to the server, looking for the armed marker.
func (p *chProxy) forward(c, s net.Conn) {
	defer s.Close()
	defer c.Close()
	buf := make([]byte, 64<<10)
	var tail []byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			window := append(append([]byte(nil), tail...), chunk...)
			p.mu.Lock()
			h := p.arm
			switch {
			case h == nil || !bytes.Contains(window, h.marker):
				h = nil
			case h.skip > 0:
				h.skip--
				h = nil
				// The marker must not match again from the kept tail.
				window = window[len(window):]
			default:
				p.arm = nil
			}
			p.mu.Unlock()
			if h != nil {
				if h.midData && !forwardPrefix(c, s, chunk, buf) {
					return
				}
				close(h.caught)
				<-h.release
				return
			}
			if _, err := s.Write(chunk); err != nil {
				return
			}
			tail = window[len(window)-min(len(window), 256):]
		}
		if err != nil {
			return
		}
	}
}

// forwardPrefix sends the first midDataBytes of the stream that starts with
// first, reading more from c as needed; it reports whether that worked.
func forwardPrefix(c, s net.Conn, first, buf []byte) bool {
	left := midDataBytes
	chunk := append([]byte(nil), first...)
	for {
		n := min(len(chunk), left)
		if _, err := s.Write(chunk[:n]); err != nil {
			return false
		}
		left -= n
		if left == 0 {
			return true
		}
		m, err := c.Read(buf)
		if err != nil {
			return false
		}
		chunk = buf[:m]
	}
}
