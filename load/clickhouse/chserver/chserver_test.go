package chserver

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestStartAnswersAndStopRemovesProcessAndDir(t *testing.T) {
	ctx := context.Background()
	srv, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pid, dir := srv.PID(), srv.Dir()
	if pid == 0 {
		t.Fatalf("PID() = 0 right after Start")
	}
	if !Reachable(ctx, srv.Addr()) {
		t.Fatalf("server at %s not reachable after Start", srv.Addr())
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d still exists after Stop", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir %s still exists after Stop (stat err %v)", dir, err)
	}
	if Reachable(ctx, srv.Addr()) {
		t.Errorf("server at %s still answers after Stop", srv.Addr())
	}
	if err := srv.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestKillThenResumeKeepsDataAndAddress(t *testing.T) {
	ctx := context.Background()
	srv, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	addr := srv.Addr()
	exec := func(q string) error {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
		if err != nil {
			return err
		}
		defer conn.Close()
		return conn.Exec(ctx, q)
	}
	if err := exec("CREATE TABLE default.t (x UInt8) ENGINE = MergeTree ORDER BY x"); err != nil {
		t.Fatalf("create: %v", err)
	}
	// INSERT ... VALUES through Exec hangs on 18.16 (the server waits for
	// data blocks), so insert through a batch.
	func() {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		b, err := conn.PrepareBatch(ctx, "INSERT INTO default.t (x)")
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		if err := b.Append(uint8(7)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}()
	if err := srv.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if Reachable(ctx, addr) {
		t.Fatalf("server still answers after Kill")
	}
	if srv.PID() != 0 {
		t.Fatalf("PID() = %d after Kill, want 0", srv.PID())
	}
	if err := srv.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if srv.Addr() != addr {
		t.Errorf("Addr after Resume = %s, want %s", srv.Addr(), addr)
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var x uint8
	if err := conn.QueryRow(ctx, "SELECT x FROM default.t").Scan(&x); err != nil || x != 7 {
		t.Errorf("after Resume SELECT x = %d, %v; want 7, nil", x, err)
	}
}

func TestStartFailsClearlyWithMissingBinary(t *testing.T) {
	_, err := Start(context.Background(), Options{Binary: filepath.Join(t.TempDir(), "nope")})
	if err == nil {
		t.Fatal("Start with a missing binary succeeded")
	}
}

func TestStartWithGivenDirKeepsItAfterStop(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ch")
	srv, err := Start(context.Background(), Options{Dir: dir, StartTimeout: time.Minute})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Errorf("given dir's data not kept after Stop: %v", err)
	}
}
