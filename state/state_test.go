package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	chload "github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.StopShared()
	os.Exit(code)
}

// store is what both backends offer.
type store interface {
	pipeline.StateStore
	Acquire(ctx context.Context, holder string, ttl time.Duration) (pipeline.Lease, error)
}

func newClickHouseStore(t *testing.T) (*ClickHouse, *chload.Client) {
	t.Helper()
	srv := chtest.Shared(t)
	c, err := chload.Open(context.Background(), chload.Config{Addr: []string{srv.Addr()}, Database: chtest.NewDatabase(t, srv), MaxElapsed: 10 * time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Schema().Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return NewClickHouse(c), c
}

// backends runs fn against a fresh store of each kind.
func backends(t *testing.T, fn func(t *testing.T, s store)) {
	t.Run("file", func(t *testing.T) { fn(t, NewFile(filepath.Join(t.TempDir(), "state.json"))) })
	t.Run("clickhouse", func(t *testing.T) {
		s, _ := newClickHouseStore(t)
		fn(t, s)
	})
}

func diffMarks(got, want map[string]pipeline.Mark) string {
	var b strings.Builder
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			fmt.Fprintf(&b, "%s: missing, want hwm %d last_activity %d\n", id, w.HwmMs, w.LastActivityMs)
		} else if g.UpdatedAt, w.VariableID = (time.Time{}), id; g != w {
			fmt.Fprintf(&b, "%s: got %+v, want %+v\n", id, g, w)
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			fmt.Fprintf(&b, "%s: unexpected mark hwm %d\n", id, g.HwmMs)
		}
	}
	return b.String()
}

func TestCommitNeverMovesAMarkBackwards(t *testing.T) {
	backends(t, func(t *testing.T, s store) {
		ctx := context.Background()
		got, err := s.Load(ctx)
		if err != nil || len(got) != 0 {
			t.Fatalf("Load of an empty store = %v, %v; want no marks", got, err)
		}
		steps := [][]pipeline.Mark{
			{{VariableID: "a", HwmMs: 100, LastActivityMs: 110}, {VariableID: "b", HwmMs: 5, LastActivityMs: 5}},
			{{VariableID: "a", HwmMs: 50, LastActivityMs: 999}}, // backwards: ignored entirely
			{{VariableID: "b", HwmMs: 7, LastActivityMs: 8}},    // forwards
			{{VariableID: "b", HwmMs: 7, LastActivityMs: 9}},    // same mark, newer activity
			{{VariableID: "c", HwmMs: 1700000000000, LastActivityMs: 1}},
			// A read that ended later, then one that ended earlier but
			// committed after it (two overlapping syncs): the later read's
			// mark stays whole, its point ahead included (under no known
			// lookback the winner's reread_ms stands: pipeline.MergeMark).
			{{VariableID: "d", HwmMs: 40, LastActivityMs: 41, CheckedMs: 2000, FutureMs: 3000, RereadMs: 7, RecheckedMs: 1500}},
			{{VariableID: "d", HwmMs: 40, LastActivityMs: 42, CheckedMs: 1000, RereadMs: 8, RecheckedMs: 1000}},
		}
		for i, marks := range steps {
			if err := s.Commit(ctx, marks); err != nil {
				t.Fatalf("Commit step %d: %v", i, err)
			}
		}
		got, err = s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]pipeline.Mark{
			"a": {HwmMs: 100, LastActivityMs: 110},
			"b": {HwmMs: 7, LastActivityMs: 9},
			"c": {HwmMs: 1700000000000, LastActivityMs: 1},
			"d": {HwmMs: 40, LastActivityMs: 41, CheckedMs: 2000, FutureMs: 3000, RereadMs: 7, RecheckedMs: 1500},
		}
		if d := diffMarks(got, want); d != "" {
			t.Errorf("marks after commits differ:\n%s", d)
		}
	})
}

// A mark that loses to the stored one still raises its reread_ms, in
// either order of the commits, and on ClickHouse through the merge that
// keeps one row of the variable: a backfill that outlived the mark it was
// planned with commits a greater mark with an older debt, which a cycle
// beside it has paid.
func TestTheGreaterRereadSurvivesTheMarkThatLosesAndTheMerge(t *testing.T) {
	check := func(t *testing.T, s store, merge func()) {
		ctx := context.Background()
		const lb = 3_600_000
		paid := pipeline.Mark{HwmMs: 500, LastActivityMs: 501, CheckedMs: 600, RereadMs: 400, RecheckedMs: 600, LookbackMs: lb}
		older := pipeline.Mark{HwmMs: 700, LastActivityMs: 480, CheckedMs: 550, RereadMs: 100, RecheckedMs: 300, LookbackMs: lb}
		// Under another lookback, where neither debt is the greater for
		// readers of every lookback, the winner's stands (MergeMark).
		longer := pipeline.Mark{HwmMs: 700, LastActivityMs: 480, CheckedMs: 550, RereadMs: 100, RecheckedMs: 300, LookbackMs: 2 * lb}
		// At equal marks the later read wins, whichever commits last,
		// also once ClickHouse's merge has kept one row (for equal
		// versions it keeps the row inserted last).
		later := pipeline.Mark{HwmMs: 700, LastActivityMs: 470, CheckedMs: 990, RereadMs: 50, RecheckedMs: 990, LookbackMs: lb}
		for id, order := range map[string][]pipeline.Mark{"a": {paid, older}, "b": {older, paid}, "c": {later, older}, "d": {older, later}, "e": {paid, longer}, "f": {longer, paid}} {
			for _, m := range order {
				m.VariableID = id
				if err := s.Commit(ctx, []pipeline.Mark{m}); err != nil {
					t.Fatal(err)
				}
			}
		}
		merge()
		got, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := pipeline.Mark{HwmMs: 700, LastActivityMs: 480, CheckedMs: 550, RereadMs: 400, RecheckedMs: 300, LookbackMs: lb}
		tie := pipeline.Mark{HwmMs: 700, LastActivityMs: 470, CheckedMs: 990, RereadMs: 100, RecheckedMs: 990, LookbackMs: lb}
		if d := diffMarks(got, map[string]pipeline.Mark{"a": want, "b": want, "c": tie, "d": tie, "e": longer, "f": longer}); d != "" {
			t.Errorf("marks differ:\n%s", d)
		}
	}
	t.Run("file", func(t *testing.T) { check(t, NewFile(filepath.Join(t.TempDir(), "state.json")), func() {}) })
	t.Run("clickhouse", func(t *testing.T) {
		s, c := newClickHouseStore(t)
		check(t, s, func() { mergeSyncState(t, c, 6) })
	})
}

func TestConcurrentCommitsKeepTheGreatestMark(t *testing.T) {
	backends(t, func(t *testing.T, s store) {
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 5 {
					// Writers interleave so some commits are behind others.
					hwm := int64(i*4 + w)
					if err := s.Commit(ctx, []pipeline.Mark{{VariableID: "v", HwmMs: hwm}, {VariableID: fmt.Sprint("w", w), HwmMs: hwm}}); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Commit: %v", err)
		}
		got, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]pipeline.Mark{"v": {HwmMs: 19}, "w0": {HwmMs: 16}, "w1": {HwmMs: 17}, "w2": {HwmMs: 18}, "w3": {HwmMs: 19}}
		if d := diffMarks(got, want); d != "" {
			t.Errorf("marks after concurrent commits differ:\n%s", d)
		}
	})
}

func TestLeaseIsExclusiveUntilReleased(t *testing.T) {
	backends(t, func(t *testing.T, s store) {
		ctx := context.Background()
		a, err := s.Acquire(ctx, "host-a:1", time.Minute)
		if err != nil {
			t.Fatalf("first Acquire: %v", err)
		}
		_, err = s.Acquire(ctx, "host-b:2", time.Minute)
		var held *pipeline.LeaseHeldError
		if !errors.As(err, &held) || !errors.Is(err, pipeline.ErrLeaseHeld) {
			t.Fatalf("second Acquire while held = %v, want a *LeaseHeldError", err)
		}
		if held.Holder != "host-a:1" || held.Expires.Before(time.Now()) {
			t.Errorf("LeaseHeldError names holder %q until %s, want host-a:1 in the future", held.Holder, held.Expires)
		}
		if !strings.Contains(err.Error(), "host-a:1") {
			t.Errorf("message does not name the holder: %v", err)
		}
		if err := a.Renew(ctx); err != nil {
			t.Errorf("Renew by the holder: %v", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		b, err := s.Acquire(ctx, "host-b:2", time.Minute)
		if err != nil {
			t.Fatalf("Acquire after Release: %v", err)
		}
		if b.Holder() != "host-b:2" {
			t.Errorf("Holder() = %q", b.Holder())
		}
		if err := a.Renew(ctx); !errors.Is(err, pipeline.ErrLeaseLost) {
			t.Errorf("Renew of a released lease = %v, want ErrLeaseLost", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Errorf("second Release: %v", err)
		}
		if _, err := s.Acquire(ctx, "host-c:3", time.Minute); !errors.Is(err, pipeline.ErrLeaseHeld) {
			t.Errorf("Acquire while b holds = %v, want ErrLeaseHeld (a's late Release must not free b's lease)", err)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestConcurrentAcquireHasOneWinner(t *testing.T) {
	backends(t, func(t *testing.T, s store) {
		ctx := context.Background()
		const n = 4
		var wg sync.WaitGroup
		results := make([]error, n)
		leases := make([]pipeline.Lease, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				leases[i], results[i] = s.Acquire(ctx, fmt.Sprint("h", i), time.Minute)
			}()
		}
		wg.Wait()
		winners := 0
		for i, err := range results {
			switch {
			case err == nil:
				winners++
			case !errors.Is(err, pipeline.ErrLeaseHeld):
				t.Errorf("contender %d: %v", i, err)
			}
		}
		// ClickHouse's claim has a documented race window in which two
		// contenders both win; at most one of them survives a Renew.
		renewed := 0
		for _, l := range leases {
			if l != nil && l.Renew(ctx) == nil {
				renewed++
			}
		}
		if winners < 1 || renewed != 1 {
			t.Errorf("%d contenders acquired, %d renewed; want at least 1 and exactly 1 (errors %v)", winners, renewed, results)
		}
	})
}

func TestClickHouseLeaseLapsesAfterTTL(t *testing.T) {
	s, _ := newClickHouseStore(t)
	ctx := context.Background()
	a, err := s.Acquire(ctx, "crashed", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := s.Acquire(ctx, "next", time.Minute)
		if err == nil {
			if err := a.Renew(ctx); !errors.Is(err, pipeline.ErrLeaseLost) {
				t.Errorf("Renew by the lapsed holder = %v, want ErrLeaseLost", err)
			}
			_ = b.Release(ctx)
			return
		}
		if !errors.Is(err, pipeline.ErrLeaseHeld) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease of 300ms still held after 10s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestFileLeaseIsFreedWhenTheHolderDies(t *testing.T) {
	// The flock belongs to the open file; closing it as the kernel does for
	// a dead process must free the lease without Release.
	f := NewFile(filepath.Join(t.TempDir(), "state.json"))
	ctx := context.Background()
	a, err := f.Acquire(ctx, "dies", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a.(*fileLease).fh.Close()
	if _, err := f.Acquire(ctx, "next", time.Hour); err != nil {
		t.Errorf("Acquire after the holder's file was closed: %v", err)
	}
}

func TestFileCommitIsAtomicAndLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	f := NewFile(path)
	ctx := context.Background()
	if err := f.Commit(ctx, []pipeline.Mark{{VariableID: "a", HwmMs: 1}}); err != nil {
		t.Fatal(err)
	}
	// A reader racing the writers must always see a whole, valid file.
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		defer close(readErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := NewFile(path).Load(ctx); err != nil {
				readErr <- err
				return
			}
		}
	}()
	for i := range 50 {
		if err := f.Commit(ctx, []pipeline.Mark{{VariableID: "a", HwmMs: int64(i + 2)}, {VariableID: fmt.Sprint("v", i), HwmMs: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-readErr; err != nil {
		t.Errorf("a concurrent reader saw a broken file: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
	got, err := f.Load(ctx)
	if err != nil || got["a"].HwmMs != 51 || len(got) != 51 {
		t.Errorf("after 50 commits: mark a = %d, %d marks, err %v; want 51, 51, nil", got["a"].HwmMs, len(got), err)
	}
}

func TestFileCorruptionIsAClearErrorNamingThePath(t *testing.T) {
	for name, content := range map[string]string{
		"truncated json": `{"format":1,"marks":{"a":{"hwm_ms":`,
		"wrong format":   `{"format":7,"marks":{}}`,
		"wrong types":    `{"format":1,"marks":{"a":{"hwm_ms":"soon"}}}`,
		"empty id":       `{"format":1,"marks":{"":{"hwm_ms":1}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			f := NewFile(path)
			_, err := f.Load(context.Background())
			var ce *CorruptFileError
			if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "delete it") {
				t.Errorf("Load of a corrupt file = %v, want a *CorruptFileError naming %s and the fix", err, path)
			}
			// Commit must refuse too rather than overwrite what a human may
			// want to repair.
			if err := f.Commit(context.Background(), []pipeline.Mark{{VariableID: "a", HwmMs: 1}}); !errors.As(err, &ce) {
				t.Errorf("Commit over a corrupt file = %v, want a *CorruptFileError", err)
			}
			if data, _ := os.ReadFile(path); string(data) != content {
				t.Errorf("corrupt file was rewritten: %q", data)
			}
		})
	}
}

// mergeSyncState has ClickHouse merge sync_state's rows until rows are
// left (one a variable): OPTIMIZE … FINAL does nothing while a background
// merge holds the parts, so it is asked again.
func mergeSyncState(t *testing.T, c *chload.Client, rows uint64) {
	t.Helper()
	ctx := context.Background()
	var n uint64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := c.Conn().Exec(ctx, "OPTIMIZE TABLE "+c.Table(chload.TableSyncState)+" FINAL"); err != nil {
			t.Fatal(err)
		}
		if err := c.Conn().QueryRow(ctx, "SELECT count() FROM "+c.Table(chload.TableSyncState)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == rows {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after OPTIMIZE FINAL: %d rows, want %d (one a variable)", n, rows)
		}
	}
}

func TestClickHouseMarksSurviveMergesWithTheGreatestMark(t *testing.T) {
	s, c := newClickHouseStore(t)
	ctx := context.Background()
	for _, hwm := range []int64{300, 100, 200} {
		if err := s.Commit(ctx, []pipeline.Mark{{VariableID: "v", HwmMs: hwm, LastActivityMs: hwm + 1}}); err != nil {
			t.Fatal(err)
		}
	}
	mergeSyncState(t, c, 1)
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got["v"].HwmMs != 300 || got["v"].LastActivityMs != 301 {
		t.Errorf("after merge: mark %+v; want hwm 300 last_activity 301", got["v"])
	}
}

// The events' marks round-trip through the warehouse's event_state table,
// and the later of two commits of one event wins.
func TestEventMarksRoundTrip(t *testing.T) {
	st, _ := newClickHouseStore(t)
	ctx := context.Background()
	ts := time.Date(2026, 11, 20, 12, 0, 0, 123456000, time.UTC)
	old := metadata.EventMark{Event: "~overheat", CreatedAtUs: ts.UnixMicro() - 1, IDs: []string{"l0"}}
	mark := metadata.EventMark{Event: "~overheat", CreatedAtUs: ts.UnixMicro(), IDs: []string{"l1", "l2"}}
	for _, m := range []metadata.EventMark{old, mark, mark} { // a retried commit is one row under FINAL
		if err := st.CommitEventMark(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	marks, err := st.EventMarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(marks, map[string]metadata.EventMark{"~overheat": mark}) {
		t.Fatalf("EventMarks = %+v, want %+v", marks, mark)
	}
}
