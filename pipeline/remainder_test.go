package pipeline

import (
	"slices"
	"testing"
)

// The planning of a cut frame's remainder (density.go) on its own.

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
