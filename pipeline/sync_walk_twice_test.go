package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// twiceSource hands its variables, then hands them again, as the fleet
// walk does when the account-wide list turns out unattributable part way
// and the per-device listing starts over (WalkSink allows it).
type twiceSource struct {
	*memSource
	la map[string]int64
}

func (s twiceSource) Walk(ctx context.Context, _ Scope, sink WalkSink) error {
	if err := sink.Devices(ctx, []Device{{ID: "d"}}); err != nil {
		return err
	}
	for range 2 {
		for id := range s.points {
			if err := sink.Variables(ctx, []Variable{{ID: id, DeviceID: "d", LastActivityMs: s.la[id]}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// A variable handed twice within a chunk is one variable of the fleet:
// the cycle's Summary (and fleetsync_variables_synced, set from it) counts
// it once, and a lagging variable is one lagging variable. (Handed again
// in a later chunk, it is counted again: see cycleWalk.pending.)
func TestAVariableHandedTwiceInOneChunkCountsOnce(t *testing.T) {
	for _, chunk := range []int{0, 6} {
		t.Run(fmt.Sprintf("chunk %d", chunk), func(t *testing.T) {
			now := time.UnixMilli(1_750_000_000_000)
			mem, _ := fixture(3, 10, now.UnixMilli()-10*60_000)
			la := map[string]int64{}
			for id, pts := range mem.points {
				la[id] = pts[len(pts)-1].TsMs
			}
			src := twiceSource{mem, la}
			st := &memStore{marks: map[string]Mark{}}
			w := &memWriter{rows: map[string]map[int64]Row{}}
			m, _ := NewMetrics(nil)
			s := NewSyncer(src, w, Stages{}, st, SyncOptions{
				Engine: EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour,
				Lookback: time.Hour, LagThreshold: time.Minute, MoveChunk: chunk,
				Now: func() time.Time { return now },
			}, nil, m)
			if _, err := s.Cycle(context.Background()); err != nil {
				t.Fatal(err)
			}
			now = now.Add(30 * time.Minute)
			la["v000"] = now.UnixMilli() + 10*60_000 // a point known to be missing
			sum, err := s.Cycle(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if sum.Variables != 3 || gaugeValue(t, m.variablesSynced) != 3 || sum.Lagging != 1 || gaugeValue(t, m.lagging) != 1 {
				t.Fatalf("3 variables, 1 lagging, each handed twice: Summary says %d variables and %d lagging, fleetsync_variables_synced %v, fleetsync_variables_lagging %v; want 3 and 1",
					sum.Variables, sum.Lagging, gaugeValue(t, m.variablesSynced), gaugeValue(t, m.lagging))
			}
		})
	}
}

// partWalkSource hands its variables, then fails, as a walk does whose
// last device listing answers 500 every time.
type partWalkSource struct{ *memSource }

func (s partWalkSource) Walk(ctx context.Context, _ Scope, sink WalkSink) error {
	var vars []Variable
	for id := range s.points {
		vars = append(vars, Variable{ID: id, DeviceID: "d"})
	}
	if err := sink.Variables(ctx, vars); err != nil {
		return err
	}
	return fmt.Errorf("list variables of device d9: 500 Internal Server Error")
}

// The variables walked before the walk failed are moved all the same (a
// device whose listing fails every cycle must not hold back the chunk
// being filled for ever), and the cycle still fails with the walk's error.
func TestAWalkThatFailsPartWayMovesWhatItWalked(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	mem, _ := fixture(3, 10, now.UnixMilli()-10*60_000)
	w := &memWriter{rows: map[string]map[int64]Row{}}
	s := NewSyncer(partWalkSource{mem}, w, Stages{}, &memStore{marks: map[string]Mark{}}, SyncOptions{
		Engine: EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour, Lookback: time.Hour,
		Now: func() time.Time { return now },
	}, nil, nil)
	sum, err := s.Cycle(context.Background())
	if err == nil || sum.Completed != 3 {
		t.Fatalf("cycle: %v, %d completed; want the walk's error and the 3 walked variables completed", err, sum.Completed)
	}
	var ids []string
	for id := range mem.points {
		ids = append(ids, id)
	}
	checkLoaded(t, mem, w, ids)
}
