package fleetsim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestSeriesOrderChoosesTheKeptPointsAndTheirServedOrder(t *testing.T) {
	for _, c := range []struct {
		flag              string
		keepOldest        bool
		sorted, ascending bool
	}{
		{"newest", false, true, false},
		{"oldest", true, true, true},
		{"shuffled", false, false, false},
		{"newest-ascending", false, true, true},
	} {
		t.Run(c.flag, func(t *testing.T) {
			o, err := ParseSeriesOrder(c.flag)
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, Options{SeriesOrder: o})
			id := e.sim.Devices()[0].Variables[0].ID
			pts := e.retained(id) // newest first
			const limit = 50
			_, _, res := e.rawSeries(map[string]any{"variables": []string{id}, "columns": []string{"timestamp"}, "join_dataframes": false,
				"start": pts[len(pts)-1].TimestampMs, "end": pts[0].TimestampMs, "limit": limit})
			var got []int64
			for _, row := range res[0].([]any) {
				got = append(got, int64(row.([]any)[0].(float64)))
			}
			var want []int64
			for _, p := range pts[:limit] {
				want = append(want, p.TimestampMs)
			}
			if c.keepOldest {
				want = want[:0]
				for _, p := range pts[len(pts)-limit:] {
					want = append(want, p.TimestampMs)
				}
			}
			served := slices.Clone(got)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("kept %v, want %v", got, want)
			}
			asc := slices.IsSorted(served)
			desc := slices.IsSortedFunc(served, func(a, b int64) int { return int(b - a) })
			if c.sorted && (asc != c.ascending || desc == c.ascending) || !c.sorted && (asc || desc) {
				t.Fatalf("served in the order %v, want sorted %v ascending %v", served, c.sorted, c.ascending)
			}
		})
	}
	if _, err := ParseSeriesOrder("sideways"); err == nil {
		t.Fatal("an unknown series order was accepted")
	}
}

func TestSeriesFlagsParseEveryCutAndOrderAndTheOlderOrders(t *testing.T) {
	for _, c := range []struct {
		cut, order string
		want       SeriesOrder
	}{
		{"", "", SeriesOrder{CutNewest, RowsNewestFirst}},
		{"newest", "", SeriesOrder{CutNewest, RowsNewestFirst}},
		{"oldest", "", SeriesOrder{CutOldest, RowsNewestFirst}},
		{"any", "", SeriesOrder{CutAny, RowsNewestFirst}},
		{" Mixed ", "", SeriesOrder{CutMixed, RowsNewestFirst}},
		{"", "newest-first", SeriesOrder{CutNewest, RowsNewestFirst}},
		{"", "oldest-first", SeriesOrder{CutNewest, RowsOldestFirst}},
		{"any", "shuffled", SeriesOrder{CutAny, RowsShuffled}},
		{"mixed", "oldest-first", SeriesOrder{CutMixed, RowsOldestFirst}},
		// The older values: each names a cut and an order.
		{"", "newest", SeriesNewest},
		{"", "oldest", SeriesOldest},
		{"", "shuffled", SeriesShuffled},
		{"", "newest-ascending", SeriesNewestAscending},
		{"oldest", "oldest", SeriesOrder{CutOldest, RowsOldestFirst}},
		{"oldest", "shuffled", SeriesOrder{CutOldest, RowsShuffled}},
	} {
		got, err := ParseSeriesFlags(c.cut, c.order)
		if err != nil || got != c.want {
			t.Errorf("--series-cut %q --series-order %q: got %v, %v; want %v", c.cut, c.order, got, err, c.want)
		}
	}
	for _, legacy := range []struct {
		order string
		want  SeriesOrder
	}{{"newest", SeriesOrder{CutNewest, RowsNewestFirst}}, {"oldest", SeriesOrder{CutOldest, RowsOldestFirst}},
		{"shuffled", SeriesOrder{CutNewest, RowsShuffled}}, {"newest-ascending", SeriesOrder{CutNewest, RowsOldestFirst}}} {
		if got, err := ParseSeriesOrder(legacy.order); err != nil || got != legacy.want {
			t.Errorf("ParseSeriesOrder(%q) = %v, %v; want %v", legacy.order, got, err, legacy.want)
		}
	}
	for _, bad := range [][2]string{{"sideways", ""}, {"", "sideways"}, {"any", "oldest"}, {"oldest", "newest-ascending"}, {"mixed", "newest"}} {
		if got, err := ParseSeriesFlags(bad[0], bad[1]); err == nil {
			t.Errorf("--series-cut %q --series-order %q was accepted as %v", bad[0], bad[1], got)
		}
	}
	if _, err := New(Options{SeriesOrder: SeriesOrder{Cut: CutMixed + 1}}); err == nil {
		t.Error("New accepted an unknown cut")
	}
	if _, err := New(Options{SeriesOrder: SeriesOrder{Rows: RowsShuffled + 1}}); err == nil {
		t.Error("New accepted an unknown row order")
	}
}

var (
	everyCut      = []SeriesCut{CutNewest, CutOldest, CutAny, CutMixed}
	everyRowOrder = []RowOrder{RowsNewestFirst, RowsOldestFirst, RowsShuffled}
)

// frames reads the timestamps of each per-variable frame of a raw-series
// request over ids, in served order.
func (e *env) frames(ids []string, start, end int64, limit int) [][]int64 {
	e.t.Helper()
	r, _, res := e.rawSeries(map[string]any{"variables": ids, "columns": []string{"timestamp"}, "join_dataframes": false,
		"start": start, "end": end, "limit": limit})
	if r.status != 200 {
		e.t.Fatalf("raw series: %d %s", r.status, r.body)
	}
	out := make([][]int64, len(res))
	for i, f := range res {
		for _, row := range f.([]any) {
			out[i] = append(out[i], int64(row.([]any)[0].(float64)))
		}
	}
	return out
}

// sortedDesc reports whether ts is strictly newest first.
func sortedDesc(ts []int64) bool {
	return slices.IsSortedFunc(ts, func(a, b int64) int { return int(b - a) }) && len(slices.Compact(slices.Clone(ts))) == len(ts)
}

// sortedAsc reports whether ts is strictly oldest first.
func sortedAsc(ts []int64) bool {
	return slices.IsSorted(ts) && len(slices.Compact(slices.Clone(ts))) == len(ts)
}

// checkRowOrder fails unless served (a frame of distinct timestamps) is in
// the order rows says; a shuffled frame of more than a few rows is neither
// newest nor oldest first.
func checkRowOrder(t *testing.T, what string, rows RowOrder, served []int64) {
	t.Helper()
	switch rows {
	case RowsNewestFirst:
		if !sortedDesc(served) {
			t.Fatalf("%s: served %v, want newest first", what, served)
		}
	case RowsOldestFirst:
		if !sortedAsc(served) {
			t.Fatalf("%s: served %v, want oldest first", what, served)
		}
	case RowsShuffled:
		if len(served) >= 8 && (sortedAsc(served) || sortedDesc(served)) {
			t.Fatalf("%s: served %v in time order, want shuffled", what, served)
		}
	}
}

// Each cut keeps the points it says of a frame the limit cut, and each
// order serves them (or a whole frame) as it says, for every pair; random
// choices follow the seed and the frame, not the request around it.
func TestSeriesCutKeepsItsPointsAndRowOrderServesThemUnderEveryPair(t *testing.T) {
	const limit = 50
	for _, cut := range everyCut {
		for _, rows := range everyRowOrder {
			t.Run(cut.String()+"/"+rows.String(), func(t *testing.T) {
				e := newEnv(t, Options{SeriesOrder: SeriesOrder{cut, rows}})
				var ids []string
				retained := map[string][]int64{} // newest first
				lo, hi := int64(maxTs), int64(minTs)
				for _, d := range e.sim.Devices() {
					for _, v := range d.Variables {
						ids = append(ids, v.ID)
						for _, p := range e.retained(v.ID) {
							retained[v.ID] = append(retained[v.ID], p.TimestampMs)
							lo, hi = min(lo, p.TimestampMs), max(hi, p.TimestampMs)
						}
					}
				}
				frames := e.frames(ids, lo, hi, limit)
				var cutFrames, newestKept, oldestKept, otherKept int
				for i, id := range ids {
					all, served := retained[id], frames[i]
					what := fmt.Sprintf("frame of %s (%d points in the window, limit %d)", id, len(all), limit)
					if len(all) <= limit {
						// Not cut: every point, in the order.
						if got := slices.Sorted(slices.Values(served)); !slices.Equal(got, slices.Sorted(slices.Values(all))) {
							t.Fatalf("%s: kept %v, want all %v", what, got, all)
						}
						checkRowOrder(t, what, rows, served)
						continue
					}
					cutFrames++
					kept := slices.Sorted(slices.Values(served))
					newest := slices.Sorted(slices.Values(all[:limit]))
					oldest := slices.Sorted(slices.Values(all[len(all)-limit:]))
					isNewest, isOldest := slices.Equal(kept, newest), slices.Equal(kept, oldest)
					switch {
					case isNewest:
						newestKept++
					case isOldest:
						oldestKept++
					default:
						otherKept++
					}
					switch cut {
					case CutNewest:
						if !isNewest {
							t.Fatalf("%s: kept %v, want the newest %v", what, kept, newest)
						}
					case CutOldest:
						if !isOldest {
							t.Fatalf("%s: kept %v, want the oldest %v", what, kept, oldest)
						}
					case CutMixed:
						if !isNewest && !isOldest {
							t.Fatalf("%s: kept %v, want the newest %v or the oldest %v", what, kept, newest, oldest)
						}
					case CutAny:
						if len(kept) != limit || len(slices.Compact(slices.Clone(kept))) != limit {
							t.Fatalf("%s: kept %d points (%d distinct), want %d", what, len(kept), len(slices.Compact(slices.Clone(kept))), limit)
						}
						for _, ts := range kept {
							if !slices.Contains(all, ts) {
								t.Fatalf("%s: kept %d, which is not a point of the window", what, ts)
							}
						}
					}
					checkRowOrder(t, what, rows, served)
				}
				if cutFrames < 8 {
					t.Fatalf("only %d frames were cut; the test needs more", cutFrames)
				}
				// Random cuts are random: the mixed cut keeps each end in
				// some frame, the any cut neither end in every frame.
				if cut == CutMixed && (newestKept == 0 || oldestKept == 0) {
					t.Fatalf("mixed cut: %d frames kept the newest, %d the oldest; want both ends", newestKept, oldestKept)
				}
				if cut == CutAny && otherKept != cutFrames {
					t.Fatalf("any cut: %d of %d frames kept the newest or the oldest points", cutFrames-otherKept, cutFrames)
				}

				// A frame whose window holds fewer points than the limit is
				// served whole, in the order.
				for i, f := range e.frames(ids, lo, hi, 1000) {
					what := "uncut frame of " + ids[i]
					if !slices.Equal(slices.Sorted(slices.Values(f)), slices.Sorted(slices.Values(retained[ids[i]]))) {
						t.Fatalf("%s: kept %d points, want all %d", what, len(f), len(retained[ids[i]]))
					}
					checkRowOrder(t, what, rows, f)
				}

				// Deterministic: the same request gives the same frames, and
				// a variable's frame does not depend on the other variables
				// of the request nor on their order.
				if again := e.frames(ids, lo, hi, limit); !slices.EqualFunc(again, frames, slices.Equal) {
					t.Fatal("the same request was served differently twice")
				}
				rev := slices.Clone(ids)
				slices.Reverse(rev)
				for i, f := range e.frames(rev, lo, hi, limit) {
					if want := frames[len(ids)-1-i]; !slices.Equal(f, want) {
						t.Fatalf("frame of %s in a request of the variables reversed: %v, want %v", rev[i], f, want)
					}
				}
				for i, id := range ids[:3] {
					if f := e.frames([]string{id}, lo, hi, limit)[0]; !slices.Equal(f, frames[i]) {
						t.Fatalf("frame of %s alone: %v, want %v", id, f, frames[i])
					}
				}
				// And the same in a second simulator of the same seed.
				e2 := newEnv(t, Options{SeriesOrder: SeriesOrder{cut, rows}})
				if f2 := e2.frames(ids, lo, hi, limit); !slices.EqualFunc(f2, frames, slices.Equal) {
					t.Fatal("a second simulator of the same seed served the request differently")
				}
			})
		}
	}
}

// The random choices follow the seed: another seed, other frames.
func TestSeriesRandomChoicesFollowTheSeed(t *testing.T) {
	served := map[int64]string{}
	for _, seed := range []int64{42, 43} {
		e := newEnv(t, Options{Seed: seed, SeriesOrder: SeriesOrder{CutAny, RowsShuffled}})
		id := e.sim.Devices()[0].Variables[0].ID
		pts := e.retained(id)
		f := e.frames([]string{id}, pts[len(pts)-1].TimestampMs, pts[0].TimestampMs, 50)[0]
		slices.Sort(f)
		// Generated timestamps differ with the seed too: compare the
		// places of the kept points in the series.
		var places []string
		for i := len(pts) - 1; i >= 0; i-- {
			if _, ok := slices.BinarySearch(f, pts[i].TimestampMs); ok {
				places = append(places, fmt.Sprint(len(pts)-1-i))
			}
		}
		served[seed] = strings.Join(places, ",")
	}
	if served[42] == served[43] {
		t.Fatalf("seeds 42 and 43 kept the same points: %s", served[42])
	}
}
