package state

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

func TestShardLeasesExcludeTheSameIndexOnly(t *testing.T) {
	ctx := context.Background()
	s0, c := newClickHouseStore(t)
	s0.SetLease(pipeline.Shard{Index: 0, Count: 2}.LeaseName())
	s1 := NewClickHouse(c)
	s1.SetLease(pipeline.Shard{Index: 1, Count: 2}.LeaseName())
	twin := NewClickHouse(c)
	twin.SetLease(pipeline.Shard{Index: 0, Count: 2}.LeaseName())

	l0, err := s0.Acquire(ctx, "shard-0", time.Minute)
	if err != nil {
		t.Fatalf("shard 0: %v", err)
	}
	defer l0.Release(ctx)
	l1, err := s1.Acquire(ctx, "shard-1", time.Minute)
	if err != nil {
		t.Fatalf("shard 1 waited for shard 0: %v", err)
	}
	defer l1.Release(ctx)
	if _, err := twin.Acquire(ctx, "shard-0-twin", time.Minute); !errors.Is(err, pipeline.ErrLeaseHeld) {
		t.Fatalf("a second instance of shard 0 got %v, want ErrLeaseHeld", err)
	}
	if err := l0.Renew(ctx); err != nil {
		t.Errorf("shard 0's lease after the others tried: %v", err)
	}
	if err := l1.Renew(ctx); err != nil {
		t.Errorf("shard 1's lease after the others tried: %v", err)
	}
}

func TestFileShardLeasesExcludeTheSameIndexOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	stores := map[string]*File{}
	for name, lease := range map[string]string{"0": pipeline.Shard{Index: 0, Count: 2}.LeaseName(), "1": pipeline.Shard{Index: 1, Count: 2}.LeaseName(), "0-twin": pipeline.Shard{Index: 0, Count: 2}.LeaseName()} {
		stores[name] = NewFile(path)
		stores[name].SetLease(lease)
	}
	l0, err := stores["0"].Acquire(ctx, "shard-0", time.Minute)
	if err != nil {
		t.Fatalf("shard 0: %v", err)
	}
	defer l0.Release(ctx)
	l1, err := stores["1"].Acquire(ctx, "shard-1", time.Minute)
	if err != nil {
		t.Fatalf("shard 1 waited for shard 0: %v", err)
	}
	defer l1.Release(ctx)
	if _, err := stores["0-twin"].Acquire(ctx, "shard-0-twin", time.Minute); !errors.Is(err, pipeline.ErrLeaseHeld) {
		t.Fatalf("a second instance of shard 0 got %v, want ErrLeaseHeld", err)
	}
}
