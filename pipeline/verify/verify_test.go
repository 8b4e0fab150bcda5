package verify

import "testing"

func TestSumsCompareWithARelativeToleranceAndCountsExactly(t *testing.T) {
	for _, tc := range []struct {
		s    sourceStat
		w    Stats
		want bool
	}{
		{sourceStat{count: 3, sum: 0.1 + 0.2 + 0.3}, Stats{Count: 3, Sum: 0.3 + 0.2 + 0.1}, true},
		{sourceStat{count: 3, sum: 6e12}, Stats{Count: 3, Sum: 6e12 + 1e-3}, true},
		{sourceStat{count: 3, sum: 6}, Stats{Count: 3, Sum: 6.001}, false},
		{sourceStat{count: 3, sum: 6}, Stats{Count: 2, Sum: 6}, false},
		{sourceStat{count: 0, sum: 0}, Stats{}, true},
	} {
		if got := agrees(tc.s, tc.w); got != tc.want {
			t.Errorf("agrees(%+v, %+v) = %v, want %v", tc.s, tc.w, got, tc.want)
		}
	}
	for _, tc := range []struct {
		v    float64
		ok   bool
		n    int64
		whol bool
	}{{5, true, 5, true}, {5.5, true, 0, false}, {-1, true, 0, false}, {0, false, 0, false}, {0, true, 0, true}} {
		if n, ok := wholeCount(tc.v, tc.ok); n != tc.n || ok != tc.whol {
			t.Errorf("wholeCount(%v, %v) = %d, %v; want %d, %v", tc.v, tc.ok, n, ok, tc.n, tc.whol)
		}
	}
}
