// Package chtest gives tests one ClickHouse server per test process and a
// fresh database per test. It imports testing, so only tests import it:
// cmd/fleetsync-demo starts its server through chserver alone.
package chtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

// EnvTestAddr names the environment variable that points the tests at an
// already running ClickHouse (native protocol, user default, no password)
// instead of starting one per test process.
const EnvTestAddr = "FLEETSYNC_TEST_CLICKHOUSE_ADDR"

// shared is the one server per test process. It is package state on purpose:
// starting ClickHouse costs seconds, and every test of a package shares it.
var shared struct {
	once sync.Once
	mu   sync.Mutex
	srv  *chserver.Server
	err  error
}

// Shared returns the test process's ClickHouse server: the one named by
// FLEETSYNC_TEST_CLICKHOUSE_ADDR when it answers, else one started on first
// use and kept until StopShared. A server that cannot be started fails the
// test; it never skips it.
func Shared(tb testing.TB) *chserver.Server {
	tb.Helper()
	shared.once.Do(func() {
		ctx := context.Background()
		if addr := os.Getenv(EnvTestAddr); addr != "" && chserver.Reachable(ctx, addr) {
			shared.srv = chserver.External(addr)
			return
		}
		srv, err := chserver.Start(ctx, chserver.Options{})
		shared.mu.Lock()
		shared.srv, shared.err = srv, err
		shared.mu.Unlock()
	})
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.err != nil {
		tb.Fatalf("start the shared test ClickHouse: %v", shared.err)
	}
	return shared.srv
}

// StopShared stops the server Shared started, if any. Call it from TestMain
// after m.Run, so the server does not outlive the test binary:
//
//	func TestMain(m *testing.M) { code := m.Run(); chtest.StopShared(); os.Exit(code) }
func StopShared() {
	shared.mu.Lock()
	srv := shared.srv
	shared.srv = nil
	shared.mu.Unlock()
	if srv != nil {
		_ = srv.Stop()
	}
}

// NewDatabase creates a database with a unique name (test_<random hex>) on
// srv, so tests sharing a server never see each other's tables, and drops it
// when the test ends. It returns the database name.
func NewDatabase(tb testing.TB, srv *chserver.Server) string {
	tb.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("random database name: %v", err)
	}
	name := "test_" + hex.EncodeToString(b[:])
	if err := execOn(srv.Addr(), "CREATE DATABASE `"+name+"`"); err != nil {
		tb.Fatalf("create test database %s on %s: %v", name, srv.Addr(), err)
	}
	tb.Cleanup(func() {
		if err := execOn(srv.Addr(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			tb.Errorf("drop test database %s on %s: %v", name, srv.Addr(), err)
		}
	})
	return name
}

// execOn runs one statement on a short-lived connection.
func execOn(addr, query string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		Auth:        clickhouse.Auth{Username: "default"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	return conn.Exec(ctx, query)
}
