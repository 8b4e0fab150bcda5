package pipeline_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// watermarks records what a Syncer publishes.
type watermarks struct {
	mu  sync.Mutex
	got []int64
}

func (w *watermarks) PublishWatermark(_ context.Context, scope string, ms int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if scope != "" {
		return nil
	}
	w.got = append(w.got, ms)
	return nil
}

// TestTheSettledWatermarkNeverPassesAPointThatLaterLands: live variables,
// late points written between cycles and while a cycle reads, all within
// the lookback of the mark in force; a variable without points. After
// every cycle, no point of a variable that held points when a watermark
// was published lands stamped before it; the watermark never moves back;
// and once the fleet is quiet, within one recheck period it reaches the
// least mark less the lookback, where nothing more can land.
func TestTheSettledWatermarkNeverPassesAPointThatLaterLands(t *testing.T) {
	const minute = int64(60_000)
	lookback, recheck := 10*time.Minute, 30*time.Minute
	L := lookback.Milliseconds()
	t0 := int64(1_750_000_000_000)
	now := t0
	// The source writes the points queued in late right after the first
	// raw-series request of a cycle has been served.
	src := &pipelinetest.Source{}
	var mu sync.Mutex
	var late map[string][]pipeline.Point
	src.OnSeries = func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error {
		err := serve(sink)
		mu.Lock()
		queued := late
		late = nil
		mu.Unlock()
		for id, pts := range queued {
			src.Add(id, pts...)
		}
		return err
	}
	ids := []string{"a", "b", "c", "empty"}
	src.Add("empty")
	r := rand.New(rand.NewPCG(5, 5))
	write := func(id string, ts int64) {
		src.Add(id, pipeline.Point{TsMs: ts, Value: float64(ts % 97), Context: []byte("{}")})
		setLastActivity(src, id, now) // moved by every write
	}
	for _, id := range ids[:3] {
		for ts := t0 - 3*60*minute; ts < t0; ts += 7 * minute {
			write(id, ts)
		}
	}
	st := &pipelinetest.Store{}
	w := &pipelinetest.Writer{}
	wm := &watermarks{}
	s := pipeline.NewSyncer(src, w, pipeline.Stages{Watermark: wm}, st, pipeline.SyncOptions{
		// One fetcher: the points queued in late land between two
		// requests of the cycle.
		Engine: pipeline.EngineOptions{RetryWait: time.Millisecond, VariablesPerRequest: 50, MaxInFlight: 1}, Retention: 30 * 24 * time.Hour,
		Lookback: lookback, SkipIdle: true, IdleRecheck: recheck,
		Now: func() time.Time { return time.UnixMilli(now) },
	}, nil, nil)
	// published[i] is a watermark with the variables holding points then.
	type pub struct {
		ms     int64
		holder map[string]bool
	}
	var published []pub
	cycle := func() {
		t.Helper()
		before := map[string]int{}
		for _, id := range w.IDs() {
			rows := w.Rows(id)
			before[id] = len(rows)
		}
		old := map[string]map[int64]bool{}
		for _, id := range w.IDs() {
			rows := w.Rows(id)
			old[id] = map[int64]bool{}
			for ts := range rows {
				old[id][ts] = true
			}
		}
		if _, err := s.Cycle(context.Background()); err != nil {
			t.Fatalf("cycle at %d: %v", now, err)
		}
		for _, id := range w.IDs() {
			rows := w.Rows(id)
			for ts := range rows {
				if old[id][ts] {
					continue
				}
				for _, p := range published {
					if p.holder[id] && ts < p.ms {
						t.Fatalf("%s's point at %d landed after the watermark %d was published", id, ts-t0, p.ms-t0)
					}
				}
			}
		}
		wm.mu.Lock()
		last := wm.got[len(wm.got)-1]
		wm.mu.Unlock()
		if n := len(published); n > 0 && last < published[n-1].ms {
			t.Fatalf("the watermark moved back from %d to %d", published[n-1].ms-t0, last-t0)
		}
		holder := map[string]bool{}
		for id, m := range st.Marks() {
			holder[id] = m.HwmMs > 0
		}
		published = append(published, pub{last, holder})
	}
	// Live: every 5 minutes new points, late ones inside the lookback of
	// the mark in force, some written while the cycle reads.
	for c := 0; c < 30; c++ {
		cycle()
		now += 5 * minute
		for _, id := range ids[:3] {
			m, ok := st.Marks()[id]
			if r.IntN(3) > 0 {
				write(id, now-r.Int64N(5*minute))
			}
			if ok && r.IntN(3) == 0 {
				write(id, m.HwmMs-L+r.Int64N(L)) // late, between cycles
			}
			if ok && r.IntN(3) == 0 {
				// late, written right after the cycle's first read
				mu.Lock()
				if late == nil {
					late = map[string][]pipeline.Point{}
				}
				late[id] = append(late[id], pipeline.Point{TsMs: m.HwmMs - L + r.Int64N(L), Value: 1, Context: []byte("{}")})
				mu.Unlock()
			}
		}
	}
	// Quiet: within one recheck period plus a cycle the watermark reaches
	// the least mark less the lookback, and every point has landed.
	quietFrom := now
	for now < quietFrom+recheck.Milliseconds()+5*minute {
		cycle()
		now += 5 * minute
	}
	cycle()
	least := int64(-1)
	for _, id := range ids[:3] {
		if m := st.Marks()[id]; least < 0 || m.HwmMs < least {
			least = m.HwmMs
		}
		if len(w.Rows(id)) != len(distinctTs(src.Points(id))) {
			t.Errorf("%s: %d of %d points landed", id, len(w.Rows(id)), len(distinctTs(src.Points(id))))
		}
	}
	if got := published[len(published)-1].ms; got != least-L {
		t.Errorf("a recheck period into a quiet fleet the watermark is %d, want the least mark less the lookback %d", got-t0, least-L-t0)
	}
}

func distinctTs(pts []pipeline.Point) map[int64]bool {
	m := map[int64]bool{}
	for _, p := range pts {
		m[p.TsMs] = true
	}
	return m
}
