package pipeline

import (
	"context"
	"math"
	"slices"
	"testing"

	"go.uber.org/zap"
)

// Tests that kill mutants make mutate found alive in density.go: the
// boundaries of remainder's sides and windows, each case at the exact
// millisecond or count where an off-by-one would plan different reads.

// tsRange is the timestamps lo..hi, one a millisecond.
func tsRange(lo, hi int64) []int64 {
	var ts []int64
	for x := lo; x <= hi; x++ {
		ts = append(ts, x)
	}
	return ts
}

// denseFrame is a cut frame of one point a millisecond over [lo, hi] whose
// request's count was count (-1 when none was asked).
func denseFrame(lo, hi, count int64) cutFrame {
	return cutFrame{stats: frameStats{points: int(hi - lo + 1), min: lo, max: hi}, count: count, ts: tsRange(lo, hi)}
}

func TestRemainderPlansExactWindowsAtItsBoundaries(t *testing.T) {
	// Every case has a limit of 10; a frame of one point a millisecond then
	// plans windows of 8 ms (densityFill of the limit).
	const limit = 10
	cases := []struct {
		name             string
		start, end       int64
		open             bool
		innerLo, innerHi int64
		cut              cutFrame
		want             []window
	}{
		{"the frame's own points at the proven window's low edge are not counted below it: one read",
			0, 1000, false, 500, 509, denseFrame(500, 509, -1),
			[]window{{0, 499, false}, {510, 1000, false}}},
		{"the frame's own points above the proven window add to what is expected there: two reads",
			0, 1000, false, 500, 504, denseFrame(500, 509, -1),
			[]window{{0, 499, false}, {505, 512, false}, {513, 1000, false}}},
		{"a count below the frame's points expects none missing, a count of 0 too: one read below",
			0, 1000, false, 500, 504, cutFrame{stats: frameStats{points: 10, min: 495, max: 504}, count: 0, ts: tsRange(495, 504)},
			[]window{{0, 499, false}, {505, 1000, false}}},
		{"a proven window that starts at the request's start leaves nothing below",
			500, 1000, false, 500, 509, denseFrame(500, 509, -1),
			[]window{{510, 1000, false}}},
		{"windows below reach the request's start exactly: the last one is a millisecond",
			0, 18, false, 9, 18, denseFrame(9, 18, 110),
			[]window{{0, 0, false}, {1, 8, false}}},
		{"many windows expected below, little room: the windows stop at the request's start",
			0, 36, false, 20, 29, denseFrame(20, 29, 110),
			[]window{{0, 3, false}, {4, 11, false}, {12, 19, false}, {30, 36, false}}},
		{"windows above reach the request's end exactly: the last one is a millisecond",
			0, 18, false, 0, 9, denseFrame(0, 9, 110),
			[]window{{10, 17, false}, {18, 18, false}}},
		{"a proven window that ends a millisecond before a closed request's end leaves that millisecond",
			0, 10, false, 0, 9, denseFrame(0, 9, -1),
			[]window{{10, 10, false}}},
		{"a frame of a point every 2 ms plans windows of 15 ms (8 points at its density)",
			460, 540, false, 500, 518, cutFrame{stats: frameStats{points: 10, min: 500, max: 518}, count: 110, ts: []int64{500, 502, 504, 506, 508, 510, 512, 514, 516, 518}},
			[]window{{460, 469, false}, {470, 484, false}, {485, 499, false}, {519, 533, false}, {534, 540, false}}},
		{"a cut frame of null rows shows no density: each side is one read",
			0, 1000, false, 500, 509, cutFrame{stats: frameStats{points: 0}, count: 300},
			[]window{{0, 499, false}, {510, 1000, false}}},
		{"a frame whose timestamps span every int64 shows no density: each side is one read",
			0, 1000, false, 500, 509, cutFrame{stats: frameStats{points: 10, min: math.MinInt64, max: math.MaxInt64}, count: 110},
			[]window{{0, 499, false}, {510, 1000, false}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reach := c.end
			if c.open {
				reach = c.end + 5000
			}
			got := remainder(c.start, c.end, reach, c.open, limit, c.innerLo, c.innerHi, []cutFrame{c.cut})
			if !slices.Equal(got, c.want) {
				t.Errorf("remainder(%d, %d, inner [%d, %d]) = %v, want %v", c.start, c.end, c.innerLo, c.innerHi, got, c.want)
			}
		})
	}
}

// heldCounts counts the points the service holds, per variable: the
// CountSource of a service whose points do not change.
type heldCounts map[string][]int64

func (h heldCounts) Count(_ context.Context, ids []string, start, end int64) ([]int64, error) {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(between(h[id], start, end))
	}
	return out, nil
}

// unorderedCut is a cut frame of variable id that returned ts (sorted),
// served in no order.
func unorderedCut(id string, ts []int64) cutFrame {
	st := frameStats{points: len(ts), started: true}
	if len(ts) > 0 {
		st.min, st.max = ts[0], ts[len(ts)-1]
	}
	return cutFrame{t: &targetState{Target: Target{Variable: Variable{ID: id}}}, stats: st, count: -1, ts: ts}
}

func TestProveProvesWhatTheCountsShowWholeDownToZeroPointsAndOneMillisecond(t *testing.T) {
	ctx := context.Background()
	req := &request{start: 0, end: 100}
	t.Run("a cut frame of null rows that the count says holds no point is whole", func(t *testing.T) {
		pr := &prover{src: heldCounts{}, log: zap.NewNop()}
		left, whole := pr.prove(ctx, req, []cutFrame{unorderedCut("a", nil)})
		if len(left) != 0 || len(whole) != 1 {
			t.Fatalf("left %d, whole %d; want the frame whole", len(left), len(whole))
		}
	})
	t.Run("the part between the edges of a frame of one point is one millisecond, and counted", func(t *testing.T) {
		pr := &prover{src: heldCounts{"a": {40, 50, 60}}, log: zap.NewNop()}
		left, _ := pr.prove(ctx, req, []cutFrame{unorderedCut("a", []int64{50})})
		if len(left) != 1 || !left[0].inner || left[0].innerLo != 50 || left[0].innerHi != 50 {
			t.Fatalf("left %+v; want the frame proven whole in [50, 50]", left)
		}
	})
	t.Run("a count of 0 where the frame returned none proves that window", func(t *testing.T) {
		// a lost the points below its frame, b those above: the newest end
		// from b's smallest point holds none of a's, which proves a there;
		// then the oldest end up to b's greatest proves b.
		pr := &prover{src: heldCounts{"a": tsRange(0, 19), "b": tsRange(30, 49)}, log: zap.NewNop()}
		left, _ := pr.prove(ctx, req, []cutFrame{unorderedCut("a", tsRange(10, 19)), unorderedCut("b", tsRange(30, 39))})
		if len(left) != 2 {
			t.Fatalf("left %d frames, want 2", len(left))
		}
		if a := left[0]; !a.inner || a.innerLo != 30 || a.innerHi != 100 {
			t.Errorf("a: inner %v [%d, %d], want [30, 100]", a.inner, a.innerLo, a.innerHi)
		}
		if b := left[1]; !b.inner || b.innerLo != 0 || b.innerHi != 39 {
			t.Errorf("b: inner %v [%d, %d], want [0, 39]", b.inner, b.innerLo, b.innerHi)
		}
	})
}

func TestNoteProofsCountsTheRowsLeftOutsideTheProvenWindowsAsReloaded(t *testing.T) {
	const reach = 1000
	upTo := &targetState{Target: Target{Variable: Variable{ID: "a"}}}
	short := &targetState{Target: Target{Variable: Variable{ID: "b"}}}
	unproven := &targetState{Target: Target{Variable: Variable{ID: "c"}}}
	left := []cutFrame{
		{t: upTo, stats: frameStats{loaded: 10}, ts: tsRange(991, 1000), inner: true, innerLo: 995, innerHi: reach},
		{t: short, stats: frameStats{loaded: 10}, ts: tsRange(990, 999), inner: true, innerLo: 995, innerHi: reach - 1},
		{t: unproven, stats: frameStats{loaded: 10}, ts: tsRange(990, 999)},
	}
	noteProofs(left)
	if upTo.reloaded != 4 || short.reloaded != 5 || unproven.reloaded != 10 {
		t.Errorf("reloaded %d, %d and %d, want 4, 5 and 10 (the rows outside the proven windows)", upTo.reloaded, short.reloaded, unproven.reloaded)
	}
}
