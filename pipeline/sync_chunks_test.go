package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// setLastActivity makes src list variable id with lastActivity ms.
func setLastActivity(src *pipelinetest.Source, id string, ms int64) {
	v, _ := src.Variable(id)
	v.LastActivityMs = ms
	src.SetVariable(v)
}

// listActivity makes src list each variable with its newest point's
// timestamp as lastActivity, so that the lag has something to say, and
// returns their ids.
func listActivity(src *pipelinetest.Source) []string {
	ids := src.IDs()
	for _, id := range ids {
		setLastActivity(src, id, lastTs(src.Points(id)))
	}
	return ids
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
			src, _ := pipelinetest.Fixture(7, 40, now.UnixMilli()-40*60_000)
			ids := listActivity(src)
			st := &pipelinetest.Store{}
			w := &pipelinetest.Writer{}
			s := pipeline.NewSyncer(src, w, pipeline.Stages{}, st, pipeline.SyncOptions{
				Engine: pipeline.EngineOptions{RetryWait: time.Millisecond, VariablesPerRequest: 2, RowsPerRequest: 25}, Retention: 30 * 24 * time.Hour,
				Lookback: time.Hour, SkipIdle: true, IdleRecheck: time.Hour, MoveChunk: chunk, LagThreshold: time.Minute,
				Now: func() time.Time { return now },
			}, nil, nil)
			sum, err := s.Cycle(context.Background())
			if err != nil || len(sum.Failed) != 0 {
				t.Fatalf("first cycle: %v, failed %v", err, sum.Failed)
			}
			pipelinetest.CheckLoaded(t, src, w, ids)
			chunks := 1
			if chunk > 0 {
				chunks = (7 + chunk - 1) / chunk
			}
			if scans, asked := st.MarksOfCalls(); st.Loads() != 0 || scans != chunks || asked != 7 {
				t.Fatalf("the cycle loaded every mark %d times and read some %d times, asking for %d; want 0, %d (a read a chunk) and 7", st.Loads(), scans, asked, chunks)
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
			setLastActivity(src, ids[0], now.UnixMilli()+10*60_000)
			setLastActivity(src, ids[1], now.UnixMilli()+20*60_000)
			sum, err = s.Cycle(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, vars, _ := pipeline.WalkAll(context.Background(), src, pipeline.Scope{})
			marks := st.Marks()
			want := pipeline.Lag(vars, marks, s.Floor(now), now.UnixMilli())[0].Lag
			if sum.Lagging != 2 || sum.LagMax != want || want == 0 {
				t.Fatalf("second cycle: %d lagging, lag max %s; want 2 and %s (Lag over the marks loaded afresh)", sum.Lagging, sum.LagMax, want)
			}
			if scans, asked := st.MarksOfCalls(); st.Loads() != 0 || scans != 2*chunks || asked != 14 {
				t.Fatalf("two cycles loaded every mark %d times and read some %d times, asking for %d; want 0, %d and 14", st.Loads(), scans, asked, 2*chunks)
			}
		})
	}
}

// chunkedSyncer syncs 5 variables of 10 points each, moved 2 at a time,
// into a store that counts how it is read.
func chunkedSyncer(now time.Time) (*pipeline.Syncer, *pipelinetest.Source, *pipelinetest.Store, *pipelinetest.Writer) {
	src, _ := pipelinetest.Fixture(5, 10, now.UnixMilli()-10*60_000)
	st := &pipelinetest.Store{}
	w := &pipelinetest.Writer{}
	s := pipeline.NewSyncer(src, w, pipeline.Stages{}, st, pipeline.SyncOptions{
		Engine: pipeline.EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour, Lookback: time.Hour, MoveChunk: 2,
		Now: func() time.Time { return now },
	}, nil, nil)
	return s, src, st, w
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
	if scans, asked := st.MarksOfCalls(); scans != 6 || asked != 10 || st.Loads() != 0 {
		t.Fatalf("two cycles read some marks %d times (asking for %d) and loaded them all %d times; want 6 (3 chunks of 2 a cycle), 10 and 0", scans, asked, st.Loads())
	}
	if len(st.Marks()) != 5 {
		t.Fatalf("%d marks stored, want 5", len(st.Marks()))
	}
}

// A backfill takes the walk as a cycle does, a chunk at a time with the
// chunk's marks, never loading every mark, and loads every point.
func TestBackfillReadsTheMarksAChunkAtATime(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	s, src, st, w := chunkedSyncer(now)
	sum, err := s.Backfill(context.Background(), now.Add(-24*time.Hour).UnixMilli(), now.UnixMilli(), nil)
	if err != nil || sum.Completed != 5 || sum.Variables != 5 {
		t.Fatalf("backfill: %v, %d completed of %d variables, want 5 of 5", err, sum.Completed, sum.Variables)
	}
	if scans, asked := st.MarksOfCalls(); st.Loads() != 0 || scans != 3 || asked != 5 {
		t.Fatalf("the backfill loaded every mark %d times and read some %d times, asking for %d; want 0, 3 (a read a chunk of 2) and 5", st.Loads(), scans, asked)
	}
	pipelinetest.CheckLoaded(t, src, w, src.IDs())
}
