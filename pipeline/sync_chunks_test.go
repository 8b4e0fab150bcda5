package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// loadCountingStore is a memStore that counts its Loads, its reads of
// some marks and the marks those asked for.
type loadCountingStore struct {
	*memStore
	loads, scans, asked int
}

func (s *loadCountingStore) Load(ctx context.Context) (map[string]Mark, error) {
	s.loads++
	return s.memStore.Load(ctx)
}

func (s *loadCountingStore) MarksOf(ctx context.Context, ids []string, fn func(Mark) error) error {
	s.scans++
	s.asked += len(ids)
	return s.memStore.MarksOf(ctx, ids, fn)
}

// lagVarsSource lists its variables with a lastActivity each, so that the
// lag has something to say.
type lagVarsSource struct {
	*memSource
	la map[string]int64
}

func (s lagVarsSource) Walk(ctx context.Context, _ Scope, sink WalkSink) error {
	var vars []Variable
	for id := range s.points {
		vars = append(vars, Variable{ID: id, DeviceID: "d", LastActivityMs: s.la[id]})
	}
	return sink.Variables(ctx, vars)
}

// A cycle reads each variable's mark once, with its chunk (the lag does not
// read them again), moves its variables a chunk at a time with the same
// outcome as in one run, and
// computes the lag from the marks its commits left: after a complete
// first cycle nothing lags; a variable whose lastActivity then moves lags
// by what the marks say, as Lag over freshly loaded marks says too.
func TestCycleReadsEachMarkOnceAndMovesInChunksExactly(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	for _, chunk := range []int{0, 1, 3, 7} {
		t.Run(fmt.Sprintf("chunk %d", chunk), func(t *testing.T) {
			mem, _ := fixture(7, 40, now.UnixMilli()-40*60_000)
			la := map[string]int64{}
			var ids []string
			for id, pts := range mem.points {
				ids = append(ids, id)
				la[id] = pts[len(pts)-1].TsMs
			}
			src := lagVarsSource{mem, la}
			st := &loadCountingStore{memStore: &memStore{marks: map[string]Mark{}}}
			w := &memWriter{rows: map[string]map[int64]Row{}}
			s := NewSyncer(src, w, Stages{}, st, SyncOptions{
				Engine: EngineOptions{RetryWait: time.Millisecond, VariablesPerRequest: 2, RowsPerRequest: 25}, Retention: 30 * 24 * time.Hour,
				Lookback: time.Hour, SkipIdle: true, IdleRecheck: time.Hour, MoveChunk: chunk, LagThreshold: time.Minute,
				Now: func() time.Time { return now },
			}, nil, nil)
			sum, err := s.Cycle(context.Background())
			if err != nil || len(sum.Failed) != 0 {
				t.Fatalf("first cycle: %v, failed %v", err, sum.Failed)
			}
			checkLoaded(t, mem, w, ids)
			chunks := 1
			if chunk > 0 {
				chunks = (7 + chunk - 1) / chunk
			}
			if st.loads != 0 || st.scans != chunks || st.asked != 7 {
				t.Fatalf("the cycle loaded every mark %d times and read some %d times, asking for %d; want 0, %d (a read a chunk) and 7", st.loads, st.scans, st.asked, chunks)
			}
			if sum.Targets != 7 || sum.Completed != 7 || sum.LagMax != 0 || sum.Lagging != 0 {
				t.Fatalf("first cycle: %d targets, %d completed, lag max %s, %d lagging; want 7, 7, 0, 0 (its commits are in the marks the lag reads)",
					sum.Targets, sum.Completed, sum.LagMax, sum.Lagging)
			}
			// Two variables' lastActivity moves past the next cycle's end
			// (a point stamped ahead, not served yet): the cycle re-reads
			// them, keeps their last lastActivity in the marks, and
			// reports them lagging as Lag does.
			now = now.Add(30 * time.Minute)
			la[ids[0]] = now.UnixMilli() + 10*60_000
			la[ids[1]] = now.UnixMilli() + 20*60_000
			sum, err = s.Cycle(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, vars, _ := WalkAll(context.Background(), src, Scope{})
			marks, _ := st.memStore.Load(context.Background())
			want := Lag(vars, marks, s.Floor(now), now.UnixMilli())[0].Lag
			if sum.Lagging != 2 || sum.LagMax != want || want == 0 {
				t.Fatalf("second cycle: %d lagging, lag max %s; want 2 and %s (Lag over the marks loaded afresh)", sum.Lagging, sum.LagMax, want)
			}
			if st.loads != 0 || st.scans != 2*chunks || st.asked != 14 {
				t.Fatalf("two cycles loaded every mark %d times and read some %d times, asking for %d; want 0, %d and 14", st.loads, st.scans, st.asked, 2*chunks)
			}
		})
	}
}

// chunkedSyncer syncs 5 variables of 10 points each, moved 2 at a time,
// into a store that counts how it is read.
func chunkedSyncer(now time.Time) (*Syncer, *memSource, *loadCountingStore, *memWriter) {
	mem, _ := fixture(5, 10, now.UnixMilli()-10*60_000)
	st := &loadCountingStore{memStore: &memStore{marks: map[string]Mark{}}}
	w := &memWriter{rows: map[string]map[int64]Row{}}
	s := NewSyncer(listingSource{mem}, w, Stages{}, st, SyncOptions{
		Engine: EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour, Lookback: time.Hour, MoveChunk: 2,
		Now: func() time.Time { return now },
	}, nil, nil)
	return s, mem, st, w
}

// A cycle reads the marks a chunk at a time and never loads them whole;
// the second cycle sees what the first committed.
func TestCycleReadsTheMarksAChunkAtATime(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	s, _, st, _ := chunkedSyncer(now)
	for range 2 {
		if sum, err := s.Cycle(context.Background()); err != nil || sum.Completed != 5 {
			t.Fatalf("cycle: %v, %d completed, want 5", err, sum.Completed)
		}
	}
	if st.scans != 6 || st.asked != 10 || st.loads != 0 {
		t.Fatalf("two cycles read some marks %d times (asking for %d) and loaded them all %d times; want 6 (3 chunks of 2 a cycle), 10 and 0", st.scans, st.asked, st.loads)
	}
	if len(st.memStore.marks) != 5 {
		t.Fatalf("%d marks stored, want 5", len(st.memStore.marks))
	}
}

// A backfill takes the walk as a cycle does, a chunk at a time with the
// chunk's marks, never loading every mark, and loads every point.
func TestBackfillReadsTheMarksAChunkAtATime(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	s, mem, st, w := chunkedSyncer(now)
	sum, err := s.Backfill(context.Background(), now.Add(-24*time.Hour).UnixMilli(), now.UnixMilli(), nil)
	if err != nil || sum.Completed != 5 || sum.Variables != 5 {
		t.Fatalf("backfill: %v, %d completed of %d variables, want 5 of 5", err, sum.Completed, sum.Variables)
	}
	if st.loads != 0 || st.scans != 3 || st.asked != 5 {
		t.Fatalf("the backfill loaded every mark %d times and read some %d times, asking for %d; want 0, 3 (a read a chunk of 2) and 5", st.loads, st.scans, st.asked)
	}
	var ids []string
	for id := range mem.points {
		ids = append(ids, id)
	}
	checkLoaded(t, mem, w, ids)
}
