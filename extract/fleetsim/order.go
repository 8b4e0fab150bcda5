package fleetsim

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// SeriesOrder chooses which points a raw-series frame cut by `limit` keeps
// and the order its rows are served in. The spec promises neither: fleetsync
// must be exact under each.
type SeriesOrder int

const (
	// SeriesNewest keeps the newest `limit` points and serves them newest
	// first (the default).
	SeriesNewest SeriesOrder = iota
	// SeriesOldest keeps the oldest `limit` points and serves them oldest
	// first.
	SeriesOldest
	// SeriesShuffled keeps the newest `limit` points and serves them in a
	// random order.
	SeriesShuffled
	// SeriesNewestAscending keeps the newest `limit` points and serves them
	// oldest first: a sorted frame whose served order is not the order the
	// limit truncated in.
	SeriesNewestAscending
)

// ParseSeriesOrder reads the --series-order flag.
func ParseSeriesOrder(s string) (SeriesOrder, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "newest":
		return SeriesNewest, nil
	case "oldest":
		return SeriesOldest, nil
	case "shuffled":
		return SeriesShuffled, nil
	case "newest-ascending":
		return SeriesNewestAscending, nil
	}
	return 0, fmt.Errorf("series order %q: want newest, oldest, shuffled or newest-ascending", s)
}

// orderedFrame returns the cursor positions of one frame under order o: at
// most limit points of [lo, hi] (limit < 0: all), chosen and arranged as o
// says. Each element is a cursor just after next() returned its point.
func orderedFrame(ser *series, lo, hi int64, limit int, o SeriesOrder, rng *rand.Rand) []cursor {
	var all []cursor
	c := ser.cursor(lo, hi)
	for c.next() {
		all = append(all, c)
	}
	// all is newest first.
	keep := len(all)
	if limit >= 0 && limit < keep {
		keep = limit
	}
	var out []cursor
	if o == SeriesOldest {
		out = all[len(all)-keep:]
	} else {
		out = all[:keep]
	}
	switch o {
	case SeriesOldest, SeriesNewestAscending:
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case SeriesShuffled:
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}
