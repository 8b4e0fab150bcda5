package clickhouse

import (
	"math"
	"testing"
)

// sameSum's bound follows from the count and the magnitude of the rests
// hourlySum adds as Float64 (restAbs): integer values (restAbs 0) must
// agree to the final rounding, others within n·u·restAbs on each side.
func TestSameSumComparesNaNAndInfinitiesExactlyAndFiniteSumsWithinTheBoundOfTheirCount(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		got, want, restAbs float64
		n                  uint64
		same               bool
	}{
		{1, 1, 0, 1, true},
		{math.Nextafter(1e6, 2e6), 1e6, 0, 10, true}, // the final rounding
		{1e6 + 1e-6, 1e6, 0, 10, false},              // integers: no other error
		{5080064, 5080000, 0, 40002, false},          // sumKahan's answer on issue 35's hour
		{1e6 + 1e-6, 1e6, 1e4, 1000, false},          // beyond 2·1000·u·1e4 ≈ 2.2e-9
		{1e6 + 1e-6, 1e6, 1e4, 1_000_000, true},      // within 2·10^6·u·1e4 ≈ 2.2e-6
		{nan, nan, nan, 1, true},
		{nan, 3, nan, 1, false},
		{3, nan, nan, 1, false},
		{inf, inf, inf, 1, true},
		{inf, 5, inf, 1, false},
		{-inf, inf, inf, 1, false},
	} {
		if got := sameSum(c.got, c.want, c.restAbs, c.n); got != c.same {
			t.Errorf("sameSum(%v, %v, %v, %d) = %v, want %v", c.got, c.want, c.restAbs, c.n, got, c.same)
		}
	}
}
