package pipeline

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// truncation is how orderSource's limit picks and serves a cut frame.
type truncation int

const (
	keepNewestDesc     truncation = iota // the newest points, newest first (fleetsim's default)
	keepOldestAsc                        // the oldest points, oldest first
	keepNewestAsc                        // the newest points, oldest first
	keepNewestShuffled                   // the newest points, in any order
	keepAny                              // any points, in any order
)

func (k truncation) String() string {
	return [...]string{"newest-desc", "oldest-asc", "newest-asc", "newest-shuffled", "any"}[k]
}

// orderSource serves memSource's points with a limit that truncates as
// mode says, and counts them (CountSource) when counts is set. onCount
// runs before each count, as points arriving between a read and its count.
type orderSource struct {
	*memSource
	mode     truncation
	series   int
	counted  int
	onCount  func()
	countErr error
}

func (s *orderSource) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	s.mu.Lock()
	s.series++
	frames := make([][]Point, len(req.VariableIDs))
	for i, id := range req.VariableIDs {
		in := inWindow(s.points[id], req.Start, req.End) // ascending
		if req.Limit > 0 && len(in) > req.Limit {
			switch s.mode {
			case keepOldestAsc:
				in = in[:req.Limit]
			case keepAny:
				s.rng.Shuffle(len(in), func(a, b int) { in[a], in[b] = in[b], in[a] })
				in = in[:req.Limit]
			default:
				in = in[len(in)-req.Limit:]
			}
		}
		switch s.mode {
		case keepNewestDesc:
			slices.Reverse(in)
		case keepNewestShuffled, keepAny:
			s.rng.Shuffle(len(in), func(a, b int) { in[a], in[b] = in[b], in[a] })
		}
		frames[i] = in
	}
	s.mu.Unlock()
	for i, in := range frames {
		if err := serveFrame(sink, i, in); err != nil {
			return err
		}
	}
	return nil
}

func (s *orderSource) Count(_ context.Context, ids []string, start, end int64) ([]int64, error) {
	if s.onCount != nil {
		s.onCount()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counted++
	if s.countErr != nil {
		return nil, s.countErr
	}
	out := make([]int64, len(ids))
	for i, id := range ids {
		for _, p := range s.points[id] {
			if p.TsMs >= start && p.TsMs <= end {
				out[i]++
			}
		}
	}
	return out, nil
}

func TestEngineProvesFramesOfExactlyTheLimitWholeByCountInOneReadEach(t *testing.T) {
	for _, mode := range []truncation{keepNewestDesc, keepOldestAsc, keepNewestAsc, keepNewestShuffled, keepAny} {
		t.Run(mode.String(), func(t *testing.T) {
			mem, targets := fixture(12, 100, 1_700_000_000_000)
			src := &orderSource{memSource: mem, mode: mode}
			w := &memWriter{rows: map[string]map[int64]Row{}}
			st := &memStore{marks: map[string]Mark{}}
			res := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 4, MaxInFlight: 2, Counts: src}, nil, nil, nil).Run(context.Background(), targets)
			if len(res.Failed) != 0 {
				t.Fatalf("failed: %v", res.Failed)
			}
			checkLoaded(t, mem, w, ids(targets))
			if src.series != 3 || res.Requests != 3 || res.MinRequests != 3 || src.counted != 3 || res.CountRequests != 3 {
				t.Errorf("%d raw-series requests (reported %d, minimum %d) and %d counts (reported %d), want 3, 3, 3 and 3",
					src.series, res.Requests, res.MinRequests, src.counted, res.CountRequests)
			}
			if res.RowsServed != 1200 || res.Reloaded != 0 || res.Points != 1200 {
				t.Errorf("served %d rows, loaded %d of which %d again; want 1200, 1200 and 0", res.RowsServed, res.Points, res.Reloaded)
			}
		})
	}
}

func TestEngineIsExactOverDenseDataUnderEveryTruncationAndOrder(t *testing.T) {
	for _, mode := range []truncation{keepNewestDesc, keepOldestAsc, keepNewestAsc, keepNewestShuffled, keepAny} {
		t.Run(mode.String(), func(t *testing.T) {
			mem, targets := fixture(7, 1000, 1_700_000_000_000)
			src := &orderSource{memSource: mem, mode: mode}
			w := &memWriter{rows: map[string]map[int64]Row{}}
			st := &memStore{marks: map[string]Mark{}}
			res := NewEngine(src, w, st, EngineOptions{RowsPerRequest: 64, VariablesPerRequest: 3, MaxInFlight: 3, BatchRows: 500, Counts: src}, nil, nil, nil).Run(context.Background(), targets)
			if len(res.Failed) != 0 {
				t.Fatalf("failed: %v", res.Failed)
			}
			checkLoaded(t, mem, w, ids(targets))
			for _, id := range ids(targets) {
				pts := mem.points[id]
				if got, want := st.marks[id].HwmMs, pts[len(pts)-1].TsMs; got != want {
					t.Errorf("mark of %s = %d, want %d", id, got, want)
				}
			}
			if got := res.Points - res.Reloaded; got != 7000 {
				t.Errorf("%d points loaded, %d of them again: %d distinct, want 7000", res.Points, res.Reloaded, got)
			}
			served := float64(res.RowsServed) / 7000
			t.Logf("%s: %d raw-series requests (minimum %d), %d counts, rows served/loaded %.2f", mode, res.Requests, res.MinRequests, res.CountRequests, served)
			// A limit that truncates in time lets the counts prove the
			// inside of each cut frame: little is served twice.
			if mode != keepAny && served > 1.1 {
				t.Errorf("rows served per point %.2f, want at most 1.1 when the limit truncates in time", served)
			}
		})
	}
}

func TestEngineDoesNotTrustACountThatAPointArrivingAfterTheReadChanged(t *testing.T) {
	mem, targets := fixture(2, 100, 1_700_000_000_000)
	src := &orderSource{memSource: mem, mode: keepNewestDesc}
	late := Point{TsMs: 1_700_000_000_000 + 500, Value: 42, Context: []byte("{}")}
	once := sync.Once{}
	src.onCount = func() {
		once.Do(func() {
			mem.mu.Lock()
			pts := append(mem.points["v000"], late)
			slices.SortFunc(pts, func(a, b Point) int { return int(a.TsMs - b.TsMs) })
			mem.points["v000"] = pts
			mem.mu.Unlock()
		})
	}
	w := &memWriter{rows: map[string]map[int64]Row{}}
	res := NewEngine(src, w, &memStore{marks: map[string]Mark{}}, EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 2, Counts: src}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	if _, ok := w.rows["v000"][late.TsMs]; !ok {
		t.Fatalf("the point that arrived between the read and its count was not loaded (%d requests, %d counts)", res.Requests, res.CountRequests)
	}
	checkLoaded(t, mem, w, ids(targets))
}

func TestEngineWithoutCountsReadsCutFramesAgainInHalves(t *testing.T) {
	mem, targets := fixture(3, 100, 1_700_000_000_000)
	w := &memWriter{rows: map[string]map[int64]Row{}}
	res := NewEngine(mem, w, &memStore{marks: map[string]Mark{}}, EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 3}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	checkLoaded(t, mem, w, ids(targets))
	if res.Splits != 1 || res.Requests != 3 || res.CountRequests != 0 || res.Reloaded != 300 {
		t.Errorf("%d splits, %d requests, %d counts, %d re-loaded; want 1, 3, 0 and 300 (a frame of the limit is never trusted)", res.Splits, res.Requests, res.CountRequests, res.Reloaded)
	}
}

func ids(targets []Target) []string {
	var out []string
	for _, t := range targets {
		out = append(out, t.Variable.ID)
	}
	return out
}

func TestRemainderPlansTheEndsAroundTheProvenInside(t *testing.T) {
	desc := frameStats{points: 100, min: 1000, max: 1099, desc: true}
	asc := frameStats{points: 100, min: 1000, max: 1099, asc: true}
	unordered := frameStats{points: 100, min: 1000, max: 1099}
	cases := []struct {
		name     string
		start    int64
		end      int64
		open     bool
		stats    frameStats
		count    int64
		want     []window
		innerLo  int64
		innerHig int64
	}{
		{"few missing: one read each side", 0, 1200, true, desc, 110, []window{{0, 1000, false}, {1099, 1200, true}}, 1001, 1098},
		{"many missing: each side is split by density as far as it reaches", 0, 1200, false, desc, 300,
			[]window{{0, 840, false}, {841, 920, false}, {921, 1000, false}, {1099, 1178, false}, {1179, 1200, false}}, 1001, 1098},
		{"some missing, long sides: each side is split once", 0, 2000, true, asc, 250,
			[]window{{0, 920, false}, {921, 1000, false}, {1099, 1178, false}, {1179, 2000, true}}, 1001, 1098},
		{"unknown count: the limit expected on each side, one read each", 900, 1300, false, unordered, -1,
			[]window{{900, 1000, false}, {1099, 1300, false}}, 1001, 1098},
		{"exactly the limit missing: one read, which its count can prove whole", 0, 5000, false, desc, 200,
			[]window{{0, 1000, false}, {1099, 5000, false}}, 1001, 1098},
		{"inside reaches the end of an open request: nothing above is read (only points ahead of the cycle lie there)", 0, 1099, true, desc, 101,
			[]window{{0, 1000, false}}, 1001, 1099},
		{"inside ends short of the end of an open request: the end is read open", 0, 1099, true, desc, 101,
			[]window{{0, 1000, false}, {1099, 1099, true}}, 1001, 1098},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := remainder(c.start, c.end, c.end+5000, c.open, 100, c.innerLo, c.innerHig, []cutFrame{{stats: c.stats, count: c.count}})
			if !slices.Equal(got, c.want) {
				t.Errorf("remainder = %v, want %v", got, c.want)
			}
			// Together with the proven inside, the reads cover the window.
			covered := map[int64]bool{}
			for _, w := range got {
				for ts := w.start; ts <= w.end; ts++ {
					covered[ts] = true
				}
			}
			for ts := c.start; ts <= c.end; ts++ {
				if !covered[ts] && (ts < c.innerLo || ts > c.innerHig) {
					t.Fatalf("ms %d is neither proven nor read", ts)
				}
			}
		})
	}
}

func TestFrameStatsSeeTheServedOrder(t *testing.T) {
	cases := []struct {
		ts        []int64
		asc, desc bool
		min, max  int64
	}{
		{[]int64{5, 4, 4, 1}, false, true, 1, 5},
		{[]int64{1, 2, 2, 9}, true, false, 1, 9},
		{[]int64{3, 1, 2}, false, false, 1, 3},
		{[]int64{7}, true, true, 7, 7},
	}
	for _, c := range cases {
		var f frameStats
		for _, ts := range c.ts {
			f.add(ts)
		}
		if f.asc != c.asc || f.desc != c.desc || f.min != c.min || f.max != c.max || f.points != len(c.ts) {
			t.Errorf("%v: asc %v desc %v min %d max %d points %d; want %v %v %d %d %d", c.ts, f.asc, f.desc, f.min, f.max, f.points, c.asc, c.desc, c.min, c.max, len(c.ts))
		}
	}
}

func TestMinimumRequestsPacksTheFramesEachVariableNeeds(t *testing.T) {
	cases := []struct {
		points        []int64
		limit, perReq int
		want          int64
	}{
		{slices.Repeat([]int64{10000}, 500), 10000, 50, 10},
		{slices.Repeat([]int64{20000}, 1000), 10000, 50, 40},
		{[]int64{0, 0, 1}, 10, 50, 1},
		{[]int64{10001, 5}, 10000, 1, 3},
		{[]int64{7}, 0, 50, 1},
		{[]int64{25000, 25000, 25000, 25000}, 10000, 50, 3},
	}
	for _, c := range cases {
		if got := minimumRequests(c.points, c.limit, c.perReq); got != c.want {
			t.Errorf("minimumRequests(%d variables, limit %d, %d per request) = %d, want %d", len(c.points), c.limit, c.perReq, got, c.want)
		}
	}
}

func TestRemainderCountsTheFramesOwnPointsInASharedSide(t *testing.T) {
	// Two variables whose frames start 50 ms apart: the side below the
	// later edge holds the earlier frame's first 50 points besides the 100
	// missing ones, more than the limit of 100: two reads, not one cut.
	seq := func(lo, hi int64) []int64 {
		var ts []int64
		for x := lo; x <= hi; x++ {
			ts = append(ts, x)
		}
		return ts
	}
	a := cutFrame{stats: frameStats{points: 100, min: 1000, max: 1099}, count: 200, ts: seq(1000, 1099)}
	b := cutFrame{stats: frameStats{points: 100, min: 1050, max: 1149}, count: 200, ts: seq(1050, 1149)}
	got := remainder(0, 1099, 1099, false, 100, 1050, 1099, []cutFrame{a, b})
	want := []window{{0, 969, false}, {970, 1049, false}}
	if !slices.Equal(got, want) {
		t.Fatalf("remainder = %v, want %v", got, want)
	}
}

func TestEngineStopsCountingOnceTheServiceCannotCount(t *testing.T) {
	mem, targets := fixture(6, 300, 1_700_000_000_000)
	src := &orderSource{memSource: mem, mode: keepNewestDesc, countErr: errors.New("the aggregation answer has neither value nor count")}
	w := &memWriter{rows: map[string]map[int64]Row{}}
	res := NewEngine(src, w, &memStore{marks: map[string]Mark{}}, EngineOptions{RowsPerRequest: 100, VariablesPerRequest: 2, MaxInFlight: 1, Counts: src}, nil, nil, nil).Run(context.Background(), targets)
	if len(res.Failed) != 0 {
		t.Fatalf("failed: %v", res.Failed)
	}
	checkLoaded(t, mem, w, ids(targets))
	if src.counted != 1 || res.CountRequests != 1 {
		t.Fatalf("%d counts asked (reported %d) after a count failed for good, want the 1 that failed", src.counted, res.CountRequests)
	}
}
