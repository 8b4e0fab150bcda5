package chtest

import (
	"context"
	"os"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestMain(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

func TestNewDatabaseIsUniqueAndDroppedAtCleanup(t *testing.T) {
	srv := Shared(t)
	var name string
	t.Run("inner", func(t *testing.T) {
		name = NewDatabase(t, srv)
		if other := NewDatabase(t, srv); other == name {
			t.Errorf("two NewDatabase calls both returned %s", name)
		}
	})
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.databases WHERE name = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still exists after the subtest's cleanup", name)
	}
}
