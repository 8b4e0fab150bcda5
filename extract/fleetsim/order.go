package fleetsim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// SeriesCut chooses which points a per-variable raw-series frame cut by
// `limit` keeps (the window holds more than `limit` points). The spec does
// not say: fleetsync must be exact under each.
type SeriesCut int

const (
	// CutNewest keeps the newest `limit` points of the window (the
	// default, consistent with "the last 100 values").
	CutNewest SeriesCut = iota
	// CutOldest keeps the oldest `limit` points of the window.
	CutOldest
	// CutAny keeps any `limit` points of the window, chosen at random: the
	// kept points need not be contiguous nor include either end.
	CutAny
	// CutMixed keeps the newest or the oldest `limit` points, chosen per
	// frame at random, so the frames of one request may be cut at
	// different ends.
	CutMixed
)

var cutNames = []string{"newest", "oldest", "any", "mixed"}

func (c SeriesCut) String() string {
	if c >= 0 && int(c) < len(cutNames) {
		return cutNames[c]
	}
	return fmt.Sprintf("SeriesCut(%d)", int(c))
}

// ParseSeriesCut reads the --series-cut flag: newest, oldest, any or mixed.
func ParseSeriesCut(s string) (SeriesCut, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	for i, n := range cutNames {
		if v == n {
			return SeriesCut(i), nil
		}
	}
	return 0, fmt.Errorf("series cut %q: want newest, oldest, any or mixed", s)
}

// RowOrder chooses the order a per-variable raw-series frame serves its rows
// in, whether `limit` cut it or not. The spec does not say.
type RowOrder int

const (
	// RowsNewestFirst serves a frame's rows newest first (the default).
	RowsNewestFirst RowOrder = iota
	// RowsOldestFirst serves them oldest first.
	RowsOldestFirst
	// RowsShuffled serves them in a random order.
	RowsShuffled
)

var rowOrderNames = []string{"newest-first", "oldest-first", "shuffled"}

func (r RowOrder) String() string {
	if r >= 0 && int(r) < len(rowOrderNames) {
		return rowOrderNames[r]
	}
	return fmt.Sprintf("RowOrder(%d)", int(r))
}

// ParseRowOrder reads a row order: newest-first, oldest-first or shuffled.
func ParseRowOrder(s string) (RowOrder, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	for i, n := range rowOrderNames {
		if v == n {
			return RowOrder(i), nil
		}
	}
	return 0, fmt.Errorf("series order %q: want newest-first, oldest-first or shuffled (or the older newest, oldest, newest-ascending)", s)
}

// SeriesOrder is how a per-variable raw-series frame (join_dataframes false)
// is served: which points a frame cut by `limit` keeps and the order its rows
// come in, two independent choices. The zero value is the newest points,
// newest first. Random choices (CutAny, CutMixed, RowsShuffled) are a
// function of the simulator's seed and of the request's content (the
// variable, the points its window covers and the limit), never of the order
// requests arrive in nor of the clock, so a run replays.
type SeriesOrder struct {
	// Cut chooses the points a frame cut by `limit` keeps.
	Cut SeriesCut
	// Rows chooses the order the frame's rows are served in.
	Rows RowOrder
}

// The values of the older --series-order flag, each a cut and an order.
var (
	// SeriesNewest keeps the newest `limit` points and serves them newest
	// first (the default).
	SeriesNewest = SeriesOrder{CutNewest, RowsNewestFirst}
	// SeriesOldest keeps the oldest `limit` points and serves them oldest
	// first.
	SeriesOldest = SeriesOrder{CutOldest, RowsOldestFirst}
	// SeriesShuffled keeps the newest `limit` points and serves them in a
	// random order.
	SeriesShuffled = SeriesOrder{CutNewest, RowsShuffled}
	// SeriesNewestAscending keeps the newest `limit` points and serves them
	// oldest first: a sorted frame whose served order is not the order the
	// limit truncated in.
	SeriesNewestAscending = SeriesOrder{CutNewest, RowsOldestFirst}
)

// legacyOrders are the older --series-order values that name a cut as well
// as an order ("shuffled" is an order of both the older and the newer flag,
// and names no cut).
var legacyOrders = map[string]SeriesOrder{
	"newest":           SeriesNewest,
	"oldest":           SeriesOldest,
	"newest-ascending": SeriesNewestAscending,
}

func (o SeriesOrder) String() string { return "cut " + o.Cut.String() + ", rows " + o.Rows.String() }

func (o SeriesOrder) check() error {
	if o.Cut < CutNewest || o.Cut > CutMixed {
		return fmt.Errorf("fleetsim: unknown series cut %d", int(o.Cut))
	}
	if o.Rows < RowsNewestFirst || o.Rows > RowsShuffled {
		return fmt.Errorf("fleetsim: unknown row order %d", int(o.Rows))
	}
	return nil
}

// ParseSeriesOrder reads the --series-order flag alone: an order
// (newest-first, oldest-first, shuffled) with the default cut, newest; or one
// of the flag's older values, each a cut and an order: newest (newest cut,
// newest first), oldest (oldest cut, oldest first), newest-ascending (newest
// cut, oldest first).
func ParseSeriesOrder(s string) (SeriesOrder, error) {
	return ParseSeriesFlags("", s)
}

// ParseSeriesFlags reads --series-cut and --series-order together; an empty
// string is a flag not given (its default). An older --series-order value
// that names a cut (newest, oldest, newest-ascending) sets the cut too, and
// is refused with a different --series-cut.
func ParseSeriesFlags(cut, order string) (SeriesOrder, error) {
	var o SeriesOrder
	if strings.TrimSpace(order) != "" {
		if l, ok := legacyOrders[strings.ToLower(strings.TrimSpace(order))]; ok {
			o = l
		} else {
			r, err := ParseRowOrder(order)
			if err != nil {
				return SeriesOrder{}, err
			}
			o.Rows = r
			order = "" // names no cut
		}
	}
	if strings.TrimSpace(cut) != "" {
		c, err := ParseSeriesCut(cut)
		if err != nil {
			return SeriesOrder{}, err
		}
		if order != "" && c != o.Cut {
			return SeriesOrder{}, fmt.Errorf("series order %q also sets the cut (%s), which contradicts series cut %q; give the order as %s", order, o.Cut, cut, o.Rows)
		}
		o.Cut = c
	}
	return o, nil
}

// frameRand is the random source of one frame of variable id whose window
// starts cursor c (not yet moved): a function of the simulator's seed, the
// variable, the points the window covers, by their place in the series (so
// not of the wall clock the generated timestamps follow, nor of the empty
// milliseconds around them), and the limit. A frame is served the same way
// whenever, and in whatever order, it is asked for.
func frameRand(seed int64, id string, c *cursor, limit int) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	for _, v := range []int64{seed, int64(c.gStop), int64(c.gi), int64(c.oStop), int64(c.oi), int64(limit)} {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		_, _ = h.Write(b[:])
	}
	_, _ = h.Write([]byte(id))
	s := h.Sum64()
	return rand.New(rand.NewPCG(s, splitmix64(s)))
}

// orderedFrame returns the cursor positions of the frame of variable id
// over [lo, hi] under o: at most limit points (limit < 0: all), chosen by
// o.Cut and arranged by o.Rows, random choices drawn from frameRand. Each
// element is a cursor just after next() returned its point.
func orderedFrame(ser *series, id string, lo, hi int64, limit int, o SeriesOrder, seed int64) []cursor {
	c := ser.cursor(lo, hi)
	rng := frameRand(seed, id, &c, limit)
	cut := o.Cut
	if cut == CutMixed {
		// Drawn for every frame, cut or not, so that the draws that
		// follow do not depend on whether it was.
		cut = CutNewest
		if rng.IntN(2) == 1 {
			cut = CutOldest
		}
	}
	var all []cursor // newest first
	for c.next() {
		all = append(all, c)
		if cut == CutNewest && len(all) == limit {
			break // the rest would be dropped
		}
	}
	out := all
	if limit >= 0 && limit < len(all) {
		switch cut {
		case CutNewest:
			out = all[:limit]
		case CutOldest:
			out = all[len(all)-limit:]
		case CutAny:
			// Selection sampling: each limit-subset equally likely,
			// kept newest first.
			out = all[:0]
			n, need := len(all), limit
			for i := 0; need > 0; i++ {
				if rng.IntN(n-i) < need {
					out = append(out, all[i])
					need--
				}
			}
		}
	}
	switch o.Rows {
	case RowsOldestFirst:
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case RowsShuffled:
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}
