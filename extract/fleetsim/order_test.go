package fleetsim

import (
	"slices"
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
