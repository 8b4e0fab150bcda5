package pipeline

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
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

// lateDuringRead writes the points queued in late right after the first
// raw-series request of a cycle has been served.
type lateDuringRead struct {
	lagVarsSource
	mu   sync.Mutex
	late map[string][]Point
}

func (s *lateDuringRead) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	err := s.memSource.Series(ctx, req, sink)
	s.mu.Lock()
	late := s.late
	s.late = nil
	s.mu.Unlock()
	s.memSource.mu.Lock()
	for id, pts := range late {
		s.points[id] = append(s.points[id], pts...)
	}
	s.memSource.mu.Unlock()
	return err
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
	mem := &memSource{points: map[string][]Point{}, failOnce: map[string]error{}, rng: rand.New(rand.NewPCG(3, 3))}
	src := &lateDuringRead{lagVarsSource: lagVarsSource{mem, map[string]int64{}}}
	ids := []string{"a", "b", "c", "empty"}
	mem.points["empty"] = nil
	r := rand.New(rand.NewPCG(5, 5))
	write := func(id string, ts int64) {
		mem.points[id] = append(mem.points[id], Point{TsMs: ts, Value: float64(ts % 97), Context: []byte("{}")})
		src.la[id] = now // moved by every write
	}
	for _, id := range ids[:3] {
		for ts := t0 - 3*60*minute; ts < t0; ts += 7 * minute {
			write(id, ts)
		}
	}
	st := &memStore{marks: map[string]Mark{}}
	w := &memWriter{rows: map[string]map[int64]Row{}}
	wm := &watermarks{}
	s := NewSyncer(src, w, Stages{Watermark: wm}, st, SyncOptions{
		// One fetcher: the late writes of lateDuringRead and memSource's
		// reads of its points must not run at once.
		Engine: EngineOptions{RetryWait: time.Millisecond, VariablesPerRequest: 50, MaxInFlight: 1}, Retention: 30 * 24 * time.Hour,
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
		for id, rows := range w.rows {
			before[id] = len(rows)
		}
		old := map[string]map[int64]bool{}
		for id, rows := range w.rows {
			old[id] = map[int64]bool{}
			for ts := range rows {
				old[id][ts] = true
			}
		}
		if _, err := s.Cycle(context.Background()); err != nil {
			t.Fatalf("cycle at %d: %v", now, err)
		}
		for id, rows := range w.rows {
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
		for id, m := range st.marks {
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
			m, ok := st.marks[id]
			if r.IntN(3) > 0 {
				write(id, now-r.Int64N(5*minute))
			}
			if ok && r.IntN(3) == 0 {
				write(id, m.HwmMs-L+r.Int64N(L)) // late, between cycles
			}
			if ok && r.IntN(3) == 0 {
				// late, written right after the cycle's first read
				src.mu.Lock()
				if src.late == nil {
					src.late = map[string][]Point{}
				}
				src.late[id] = append(src.late[id], Point{TsMs: m.HwmMs - L + r.Int64N(L), Value: 1, Context: []byte("{}")})
				src.mu.Unlock()
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
		if m := st.marks[id]; least < 0 || m.HwmMs < least {
			least = m.HwmMs
		}
		if len(w.rows[id]) != len(distinctTs(mem.points[id])) {
			t.Errorf("%s: %d of %d points landed", id, len(w.rows[id]), len(distinctTs(mem.points[id])))
		}
	}
	if got := published[len(published)-1].ms; got != least-L {
		t.Errorf("a recheck period into a quiet fleet the watermark is %d, want the least mark less the lookback %d", got-t0, least-L-t0)
	}
}

func distinctTs(pts []Point) map[int64]bool {
	m := map[int64]bool{}
	for _, p := range pts {
		m[p.TsMs] = true
	}
	return m
}
