package state

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// rateKeeper is a store that also keeps request rates; both backends are.
type rateKeeper interface {
	store
	Rates(ctx context.Context) (map[string]Rate, error)
	SaveRate(ctx context.Context, r Rate) error
}

func sameRate(a, b Rate) bool {
	return a.Key == b.Key && a.PerSecond == b.PerSecond && a.Limited == b.Limited && a.Limit == b.Limit &&
		a.LearnedAt.Equal(b.LearnedAt) && a.SavedAt.Equal(b.SavedAt)
}

func TestRatesAreKeptByKeyAndTheLatestSaveWins(t *testing.T) {
	backends(t, func(t *testing.T, s store) {
		ctx := context.Background()
		rs := s.(rateKeeper)
		got, err := rs.Rates(ctx)
		if err != nil || len(got) != 0 {
			t.Fatalf("Rates of an empty store = %v, %v; want none", got, err)
		}
		at := time.Date(2026, 11, 25, 10, 0, 0, 123456789, time.UTC)
		a := Rate{Key: "api.example.com#0123456789abcdef", PerSecond: 3.88, Limited: true, Limit: 4, LearnedAt: at, SavedAt: at.Add(time.Minute)}
		b := Rate{Key: "127.0.0.1:8080#fedcba9876543210", PerSecond: 15.5, SavedAt: at}
		for _, r := range []Rate{a, b} {
			if err := rs.SaveRate(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		a2 := Rate{Key: a.Key, PerSecond: 3.5, Limited: true, Limit: 3.6, LearnedAt: at.Add(time.Hour), SavedAt: at.Add(time.Hour)}
		if err := rs.SaveRate(ctx, a2); err != nil {
			t.Fatal(err)
		}
		got, err = rs.Rates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || !sameRate(got[a.Key], a2) || !sameRate(got[b.Key], b) {
			t.Fatalf("kept %+v; want %+v and %+v", got, a2, b)
		}
		if err := rs.SaveRate(ctx, Rate{PerSecond: 1}); err == nil {
			t.Fatal("a rate without a key was kept")
		}
	})
}

func TestRatesAndMarksAndTheLeaseKeepOutOfEachOthersWay(t *testing.T) {
	backends(t, func(t *testing.T, s store) {
		ctx := context.Background()
		rs := s.(rateKeeper)
		if err := s.Commit(ctx, []pipeline.Mark{{VariableID: "v1", HwmMs: 100}}); err != nil {
			t.Fatal(err)
		}
		r := Rate{Key: "api.example.com#0123456789abcdef", PerSecond: 3.88, Limited: true, Limit: 4, SavedAt: time.Now().UTC()}
		if err := rs.SaveRate(ctx, r); err != nil {
			t.Fatal(err)
		}
		lease, err := s.Acquire(ctx, "host/1", time.Minute)
		if err != nil {
			t.Fatalf("acquire the lease with a rate kept: %v", err)
		}
		if _, err := s.Acquire(ctx, "host/2", time.Minute); err == nil {
			t.Fatal("a second holder got the lease while a rate was kept beside it")
		}
		if err := s.Commit(ctx, []pipeline.Mark{{VariableID: "v2", HwmMs: 200}}); err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		marks, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(marks) != 2 || marks["v1"].HwmMs != 100 || marks["v2"].HwmMs != 200 {
			t.Fatalf("marks after keeping a rate: %+v; want v1 at 100 and v2 at 200 only", marks)
		}
		rates, err := rs.Rates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rates) != 1 || !sameRate(rates[r.Key], r) {
			t.Fatalf("rates after committing marks and taking the lease: %+v; want %+v", rates, r)
		}
		// After a release, the lease is free again for another holder.
		l2, err := s.Acquire(ctx, "host/2", time.Minute)
		if err != nil {
			t.Fatalf("acquire after release with a rate kept: %v", err)
		}
		_ = l2.Release(ctx)
	})
}

func TestAStateFileWithoutRatesIsReadAndKeepsItsMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	old := `{"format": 1, "marks": {"v1": {"hwm_ms": 100, "last_activity_ms": 90, "updated_at": "2026-11-25T10:00:00Z"}}}`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	f := NewFile(path)
	ctx := context.Background()
	if rates, err := f.Rates(ctx); err != nil || len(rates) != 0 {
		t.Fatalf("Rates of a file from before rates = %v, %v; want none", rates, err)
	}
	if err := f.SaveRate(ctx, Rate{Key: "k", PerSecond: 2, SavedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	marks, err := f.Load(ctx)
	if err != nil || marks["v1"].HwmMs != 100 || marks["v1"].LastActivityMs != 90 {
		t.Fatalf("marks after saving a rate: %+v, %v", marks, err)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"rates"`) {
		t.Fatalf("the file does not keep the rate:\n%s", b)
	}
}
