package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// A variable handed twice within a chunk is one variable of the fleet:
// the cycle's Summary (and fleetsync_variables_synced, set from it) counts
// it once, and a lagging variable is one lagging variable. (Handed again
// in a later chunk, it is counted again: see cycleWalk.pending.)
func TestAVariableHandedTwiceInOneChunkCountsOnce(t *testing.T) {
	for _, chunk := range []int{0, 6} {
		t.Run(fmt.Sprintf("chunk %d", chunk), func(t *testing.T) {
			now := time.UnixMilli(1_750_000_000_000)
			src, _ := pipelinetest.Fixture(3, 10, now.UnixMilli()-10*60_000)
			listActivity(src)
			// The walk hands the variables, then hands them again, as the
			// fleet walk does when the account-wide list turns out
			// unattributable part way and the per-device listing starts
			// over (WalkSink allows it).
			src.SetDevices(pipeline.Device{ID: "d1"})
			src.OnWalk = func(sink pipeline.WalkSink, walk func(pipeline.WalkSink) error) error {
				if err := walk(sink); err != nil {
					return err
				}
				return walk(sink)
			}
			s, reg := meteredSyncer(t, src, &now, chunk)
			if _, err := s.Cycle(context.Background()); err != nil {
				t.Fatal(err)
			}
			now = now.Add(30 * time.Minute)
			setLastActivity(src, "v000", now.UnixMilli()+10*60_000) // a point known to be missing
			sum, err := s.Cycle(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if sum.Variables != 3 || gaugeValue(t, reg, "fleetsync_variables_synced") != 3 || sum.Lagging != 1 || gaugeValue(t, reg, "fleetsync_variables_lagging") != 1 {
				t.Fatalf("3 variables, 1 lagging, each handed twice: Summary says %d variables and %d lagging, fleetsync_variables_synced %v, fleetsync_variables_lagging %v; want 3 and 1",
					sum.Variables, sum.Lagging, gaugeValue(t, reg, "fleetsync_variables_synced"), gaugeValue(t, reg, "fleetsync_variables_lagging"))
			}
		})
	}
}

// The variables walked before the walk failed are moved all the same (a
// device whose listing fails every cycle must not hold back the chunk
// being filled for ever), and the cycle still fails with the walk's error.
func TestAWalkThatFailsPartWayMovesWhatItWalked(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	src, _ := pipelinetest.Fixture(3, 10, now.UnixMilli()-10*60_000)
	// The walk hands its variables, then fails, as a walk does whose last
	// device listing answers 500 every time.
	src.OnWalk = func(sink pipeline.WalkSink, walk func(pipeline.WalkSink) error) error {
		if err := walk(sink); err != nil {
			return err
		}
		return fmt.Errorf("list variables of device d9: 500 Internal Server Error")
	}
	w := &pipelinetest.Writer{}
	s := pipeline.NewSyncer(src, w, pipeline.Stages{}, &pipelinetest.Store{}, pipeline.SyncOptions{
		Engine: pipeline.EngineOptions{RetryWait: time.Millisecond}, Retention: 30 * 24 * time.Hour, Lookback: time.Hour,
		Now: func() time.Time { return now },
	}, nil, nil)
	sum, err := s.Cycle(context.Background())
	if err == nil || sum.Completed != 3 {
		t.Fatalf("cycle: %v, %d completed; want the walk's error and the 3 walked variables completed", err, sum.Completed)
	}
	pipelinetest.CheckLoaded(t, src, w, src.IDs())
}
