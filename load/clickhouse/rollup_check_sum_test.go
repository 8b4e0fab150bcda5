package clickhouse

import (
	"math"
	"testing"
)

func TestSameSumComparesNaNAndInfinitiesExactlyAndFiniteSumsWithinRounding(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		got, want, abs float64
		same           bool
	}{
		{1, 1, 1, true},
		{1e6 + 1e-7, 1e6, 1e6, true}, // rounding of a different order
		{1e6 + 1e-3, 1e6, 1e6, false},
		{nan, nan, nan, true},
		{nan, 3, nan, false},
		{3, nan, nan, false},
		{inf, inf, inf, true},
		{inf, 5, inf, false},
		{-inf, inf, inf, false},
	} {
		if got := sameSum(c.got, c.want, c.abs); got != c.same {
			t.Errorf("sameSum(%v, %v, %v) = %v, want %v", c.got, c.want, c.abs, got, c.same)
		}
	}
}
