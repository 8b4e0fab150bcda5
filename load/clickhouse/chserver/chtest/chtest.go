// Package chtest gives tests one ClickHouse server per test process and a
// fresh database per test. It imports testing, so only tests import it:
// cmd/fleetsync-demo starts its server through chserver alone.
package chtest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

// EnvTestAddr names the environment variable that points the tests at an
// already running ClickHouse (native protocol, user default, no password)
// instead of starting one per test process.
const EnvTestAddr = "FLEETSYNC_TEST_CLICKHOUSE_ADDR"

// perProcess holds one expensive test resource per test process, started
// on first use and kept until stop: starting ClickHouse costs seconds, a
// cluster many, and every test of a package shares them. It is package
// state on purpose.
type perProcess[T interface{ Stop() error }] struct {
	once sync.Once
	mu   sync.Mutex
	v    T
	err  error
	// up is true from a successful start until stop.
	up bool
}

// get returns the resource, started by start on the first call; a start
// that failed fails every caller with what.
func (p *perProcess[T]) get(tb testing.TB, what string, start func() (T, error)) T {
	tb.Helper()
	p.once.Do(func() {
		v, err := start()
		p.mu.Lock()
		p.v, p.err, p.up = v, err, err == nil
		p.mu.Unlock()
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		tb.Fatalf("start the %s: %v", what, p.err)
	}
	return p.v
}

// stop stops the resource, if one was started and is not stopped yet.
func (p *perProcess[T]) stop() {
	p.mu.Lock()
	v, up := p.v, p.up
	p.up = false
	p.mu.Unlock()
	if up {
		_ = v.Stop()
	}
}

// shared is the test process's one server.
var shared perProcess[*chserver.Server]

// Shared returns the test process's ClickHouse server: the one named by
// FLEETSYNC_TEST_CLICKHOUSE_ADDR when it answers, else one started on first
// use and kept until StopShared. A server that cannot be started fails the
// test; it never skips it.
func Shared(tb testing.TB) *chserver.Server {
	tb.Helper()
	return shared.get(tb, "shared test ClickHouse", func() (*chserver.Server, error) {
		ctx := context.Background()
		if addr := os.Getenv(EnvTestAddr); addr != "" && chserver.Reachable(ctx, addr) {
			return chserver.External(addr), nil
		}
		return chserver.Start(ctx, chserver.Options{})
	})
}

// StopShared stops the server Shared started, if any. Call it from TestMain
// after m.Run, so the server does not outlive the test binary:
//
//	func TestMain(m *testing.M) { code := m.Run(); chtest.StopShared(); os.Exit(code) }
func StopShared() { shared.stop() }

// Start starts a ClickHouse server of the test's own, for a test that
// kills, restarts or configures it, and stops it when the test ends. A
// server that cannot be started fails the test.
func Start(tb testing.TB, opts chserver.Options) *chserver.Server {
	tb.Helper()
	return own(tb, "ClickHouse", func(ctx context.Context) (*chserver.Server, error) { return chserver.Start(ctx, opts) })
}

// own starts a resource of the test's own with start, and stops it when
// the test ends.
func own[T interface{ Stop() error }](tb testing.TB, what string, start func(context.Context) (T, error)) T {
	tb.Helper()
	v, err := start(context.Background())
	if err != nil {
		tb.Fatalf("start a %s of the test's own: %v", what, err)
	}
	tb.Cleanup(func() { _ = v.Stop() })
	return v
}

// NewDatabase creates a database with a unique name (test_<random hex>) on
// srv (over TLS when srv speaks it), so tests sharing a server never see
// each other's tables, and drops it when the test ends. It returns the
// database name.
func NewDatabase(tb testing.TB, srv *chserver.Server) string {
	tb.Helper()
	name := databaseName(tb)
	if err := execOn(srv.Addr(), srv.TLSClient(), "CREATE DATABASE `"+name+"`"); err != nil {
		tb.Fatalf("create test database %s on %s: %v", name, srv.Addr(), err)
	}
	tb.Cleanup(func() {
		if err := execOn(srv.Addr(), srv.TLSClient(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			tb.Errorf("drop test database %s on %s: %v", name, srv.Addr(), err)
		}
	})
	return name
}

// databaseName is a fresh database name, test_<random hex>.
func databaseName(tb testing.TB) string {
	tb.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("random database name: %v", err)
	}
	return "test_" + hex.EncodeToString(b[:])
}

// execOn runs one statement on a short-lived connection (over TLS when tc
// is set). It waits minutes, not seconds: a DROP waits for the merges
// running on the database's tables, which after a load of millions of
// points on a busy machine take longer than half a minute.
func execOn(addr string, tc *tls.Config, query string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		Auth:        clickhouse.Auth{Username: "default"},
		TLS:         tc,
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	return conn.Exec(ctx, query)
}

// Strings runs a query of one String column on conn and returns its rows;
// a query that fails fails the test.
func Strings(tb testing.TB, conn driver.Conn, query string, args ...any) []string {
	tb.Helper()
	rows, err := conn.Query(context.Background(), query, args...)
	if err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			tb.Fatalf("%s: %v", query, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return out
}
