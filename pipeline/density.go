package pipeline

import (
	"context"
	"math"
	"slices"
	"sync/atomic"

	"go.uber.org/zap"
)

// Density-aware reads. A frame that returns `limit` rows may have been cut,
// and the spec promises neither which points a cut frame keeps (the newest,
// the oldest, any) nor the order it serves them in, so nothing about a cut
// frame is trusted without a proof. A frame's rows are real points, so they
// are loaded whatever the frame's fate; the proofs decide what is read
// again. They are counts, asked after the read: points only ever arrive, so
// a count taken after the read that equals the points the frame returned in
// the same window shows that none was missing when it was read. (The spec
// has no way to delete a point; the one way points leave, retention, makes
// the service reject a count whose window reaches past it, and a rejected
// count proves nothing.)
//
//  1. The count over the request's whole window: equal, the frame was whole.
//  2. Otherwise counts over the windows a limit that truncates the series
//     in time leaves whole: [min, end] when it kept the newest points,
//     [start, max] when it kept the oldest (the end the served order
//     suggests first), then the part between the edges, [min, max]; each
//     over the frames not proven yet (min the greatest of their smallest
//     timestamps, max the smallest of their greatest), since each frame
//     may be cut at either end. A frame whose points in a window equal
//     its count there is proven in that window, and only what lies
//     outside it, [start, min-1] and [max+1, end], is read again, in
//     windows sized from the density the frame showed; frames proven by
//     different windows plan their re-reads apart (split.go).
//  3. Otherwise (a limit that keeps any points, or a source without counts)
//     the window is read again in halves.

// frameStats describes one frame as it was served: the points it returned
// (null rows excluded), the smallest and greatest timestamp among them, and
// whether they came sorted ascending or descending (ties allowed).
type frameStats struct {
	points    int
	min, max  int64
	asc, desc bool
	started   bool
	last      int64
	// loaded is the rows of the frame appended to the chunk (those inside
	// its target's window).
	loaded int
}

// add records one point of the frame, in served order.
func (f *frameStats) add(ts int64) {
	if !f.started {
		f.started, f.asc, f.desc = true, true, true
		f.min, f.max = ts, ts
	} else {
		f.asc = f.asc && ts >= f.last
		f.desc = f.desc && ts <= f.last
		f.min, f.max = min(f.min, ts), max(f.max, ts)
	}
	f.last = ts
	f.points++
}

// cutFrame is a frame of `limit` rows waiting for its proof or its
// remainder: its target, how it was served, and the count of the request's
// window when one was asked (-1 otherwise).
type cutFrame struct {
	t     *targetState
	stats frameStats
	count int64
	// ts are the timestamps the frame returned, sorted.
	ts []int64
	// inner is true when the count proved [innerLo, innerHi] whole.
	inner            bool
	innerLo, innerHi int64
}

// between is the number of ts in [lo, hi]; ts is sorted.
func between(ts []int64, lo, hi int64) int {
	a, _ := slices.BinarySearch(ts, lo)
	b, _ := slices.BinarySearch(ts, hi+1)
	return b - a
}

// window is one read of a remainder: [start, end], reaching past end when
// open.
type window struct {
	start, end int64
	open       bool
}

// densityFill is the share of the limit a planned window aims at, so that
// an estimate a little short of the truth does not make the frame cut.
const densityFill = 0.8

// remainder plans the reads left after cut frames of a request over
// [start, end] (open when it reached past end, up to reach) with the given
// limit, whose counts proved [innerLo, innerHi] whole: [start, innerLo-1]
// and [innerHi+1, end], for all of the frames' variables together. A side
// expected to hold more than the limit allows is split into windows sized
// from the density the frames showed, beginning next to the part already
// proven; each side is expected to hold all the points the count says are
// missing, since which side lost them is not known. The expectation is a
// guess, never a proof: a window cut again is handled like any other.
func remainder(start, end, reach int64, open bool, limit int, innerLo, innerHi int64, cuts []cutFrame) []window {
	var below, above, density float64
	for _, c := range cuts {
		missing := float64(limit)
		if c.count >= 0 {
			missing = float64(max(c.count-int64(c.stats.points), 0))
		}
		// A side also holds the frame's own points there: the shared
		// window reaches past this variable's edge when another's lies
		// further in.
		below = max(below, missing+float64(between(c.ts, start, innerLo-1)))
		above = max(above, missing+float64(between(c.ts, innerHi+1, end)))
		if span := c.stats.max - c.stats.min + 1; span > 0 {
			density = max(density, float64(c.stats.points)/float64(span))
		}
	}
	per := densityFill * float64(limit)
	span := int64(1 << 62)
	if density > 0 {
		span = max(int64(per/density), 1)
	}
	// A side of at most the limit is one read (a frame of exactly the limit
	// is proven whole by its count); a larger one is read in windows of
	// densityFill of it.
	pieces := func(n float64) int {
		if n <= float64(limit) {
			return 1
		}
		return int(math.Ceil(n / per))
	}
	var ws []window
	// Below: downwards from innerLo-1; the last window reaches start.
	if innerLo > start {
		var low []window
		hi := innerLo - 1
		for k := pieces(below); k > 1 && hi-span >= start; k-- {
			low = append(low, window{start: hi - span + 1, end: hi})
			hi -= span
		}
		low = append(low, window{start: start, end: hi})
		for i := len(low) - 1; i >= 0; i-- {
			ws = append(ws, low[i])
		}
	}
	// Above: upwards from innerHi+1; the last window reaches end, open.
	// Nothing is left above a proven window that reaches as far as the
	// request did, nor above one that reaches past the end of an open
	// request: what lies beyond it is all ahead of the cycle, never loaded,
	// and its earliest point is noted instead (remainderReads). Reading it
	// again would read the same proven window again, for ever, under a
	// limit that keeps the oldest points.
	if innerHi >= reach || (open && innerHi >= end) {
		return ws
	}
	lo := innerHi + 1
	for k := pieces(above); k > 1 && lo+span <= end; k-- {
		ws = append(ws, window{start: lo, end: lo + span - 1})
		lo += span
	}
	if lo <= end || open {
		ws = append(ws, window{start: min(lo, end), end: end, open: open})
	}
	return ws
}

// minimumRequests is the fewest raw-series requests the limit allows for
// the points loaded per variable: each variable needs ceil(points/limit)
// frames (one at least, to learn it is empty); a request carries up to
// perRequest frames, and one frame of each variable, since it has one
// window for all of them.
func minimumRequests(points []int64, limit, perRequest int) int64 {
	if limit <= 0 {
		limit = 1 << 62
	}
	var frames, most int64
	for _, n := range points {
		f := max((n+int64(limit)-1)/int64(limit), 1)
		frames += f
		most = max(most, f)
	}
	return max((frames+int64(perRequest)-1)/int64(max(perRequest, 1)), most)
}

// prover asks the counts of steps 1 and 2 (see the top of this file) for
// the frames of one pass.
type prover struct {
	// src is nil when the source cannot count.
	src CountSource
	log *zap.Logger
	// asked is the count requests asked; off is set once a count failed
	// in a way that would repeat.
	asked atomic.Int64
	off   atomic.Bool
}

// newProver is the prover of e's source.
func newProver(e *Engine) *prover {
	return &prover{src: e.opts.Counts, log: e.log}
}

// prove tries the proofs of steps 1 and 2 (see the top of this file) when
// the source counts. It returns the frames the count of the request's
// window proved whole, and the frames left, each with its count and, when
// step 2 held, its proven inner window. A failed count proves nothing. It
// touches no target: the reader notes what the proofs showed
// (noteProofs).
func (pr *prover) prove(ctx context.Context, req *request, cuts []cutFrame) (left, whole []cutFrame) {
	if pr.src == nil || len(cuts) == 0 || ctx.Err() != nil || pr.off.Load() {
		return cuts, nil
	}
	ids := make([]string, len(cuts))
	for i, c := range cuts {
		ids[i] = c.t.Variable.ID
	}
	reach := req.seriesEnd()
	pr.asked.Add(1)
	counts, err := pr.src.Count(ctx, ids, req.start, reach)
	if err != nil || len(counts) != len(cuts) {
		pr.failed(len(ids), err)
		return cuts, nil
	}
	for i, c := range cuts {
		if counts[i] >= 0 && counts[i] == int64(c.stats.points) {
			whole = append(whole, c)
			continue
		}
		c.count = counts[i]
		left = append(left, c)
	}
	if len(left) == 0 {
		return nil, whole
	}
	// Step 2. A limit that truncates in time leaves one end of the window
	// whole: keeping the newest points, [min, reach]; keeping the oldest,
	// [start, max]; either, the part between the edges. Each frame of a
	// request may be cut at either end (the spec does not say), so both
	// ends are tried, the one the served order suggests first, each over
	// the frames still unproven, then the part between their edges. The
	// edges' own milliseconds are counted in: the count proves them or not.
	asc := true
	for _, c := range left {
		asc = asc && c.stats.asc && !c.stats.desc
	}
	const (
		newest = iota
		oldest
		inside
	)
	tries := []int{newest, oldest, inside}
	if asc {
		tries = []int{oldest, newest, inside}
	}
	var open []int
	for _, try := range tries {
		open = open[:0]
		for i, c := range left {
			if !c.inner {
				open = append(open, i)
			}
		}
		if len(open) == 0 || ctx.Err() != nil {
			break
		}
		lo, hi := left[open[0]].stats.min, left[open[0]].stats.max
		for _, i := range open {
			lo, hi = max(lo, left[i].stats.min), min(hi, left[i].stats.max)
		}
		w := window{start: lo, end: hi}
		switch try {
		case newest:
			w.end = reach
		case oldest:
			w.start = req.start
		}
		if w.start > w.end {
			continue
		}
		ids = ids[:0]
		for _, i := range open {
			ids = append(ids, left[i].t.Variable.ID)
		}
		pr.asked.Add(1)
		got, err := pr.src.Count(ctx, ids, w.start, w.end)
		if err != nil || len(got) != len(open) {
			pr.failed(len(ids), err)
			break
		}
		for k, i := range open {
			c := &left[i]
			if got[k] >= 0 && got[k] == int64(between(c.ts, w.start, w.end)) {
				c.inner, c.innerLo, c.innerHi = true, w.start, w.end
			}
		}
	}
	return left, whole
}

// failed notes a count that proved nothing. One that would fail the same
// way again (a 4xx, an answer it could not read) stops the pass from
// asking more: each would cost a request and prove nothing, and the cut
// frames are read again in halves, as without counts.
func (pr *prover) failed(variables int, err error) {
	if err == nil || IsRetryable(err) || pr.off.Swap(true) {
		pr.log.Debug("counting the points of cut frames failed; reading their windows again", zap.Int("variables", variables), zap.Error(err))
		return
	}
	pr.log.Warn("the service's counts cannot prove frames of rows_per_request rows whole; this run reads them again in halves instead (raising sync.rows_per_request above the points per variable avoids cut frames)",
		zap.Error(err))
}

// noteProofs notes on the targets what the proofs of a request's cut
// frames showed: the rows of a frame left, but for those in its proven
// inner window, are loaded again by its re-reads (reloaded), so that the
// rows-served ratio counts each point once. The caller holds the reader's
// lock.
func noteProofs(left []cutFrame) {
	for _, c := range left {
		n := c.stats.loaded
		if c.inner {
			n = max(n-between(c.ts, c.innerLo, c.innerHi), 0)
		}
		c.t.reloaded += int64(n)
	}
}
