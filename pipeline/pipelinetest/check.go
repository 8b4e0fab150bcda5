package pipelinetest

import (
	"math"
	"testing"
)

// CheckLoaded fails t unless w stores exactly src's points of each of ids
// (one row a timestamp): their values (NaN included), contexts and
// positions. It reports the first difference of each variable.
func CheckLoaded(t testing.TB, src *Source, w *Writer, ids []string) {
	t.Helper()
	for _, id := range ids {
		want := src.Points(id)
		got := w.Rows(id)
		if len(got) != len(want) {
			t.Errorf("variable %s: loaded %d distinct points, source has %d", id, len(got), len(want))
			continue
		}
		for _, p := range want {
			r, ok := got[p.TsMs]
			if !ok || (r.Value != p.Value && !(math.IsNaN(r.Value) && math.IsNaN(p.Value))) || r.Context != string(p.Context) {
				t.Errorf("variable %s ts %d: got %+v (present %v), want value %v context %s", id, p.TsMs, r, ok, p.Value, p.Context)
				break
			}
			if r.HasLat != p.HasLat || r.HasLng != p.HasLng || r.Lat != p.Lat || r.Lng != p.Lng {
				t.Errorf("variable %s ts %d: lat/lng %v/%v %v/%v, want %v/%v %v/%v", id, p.TsMs, r.Lat, r.HasLat, r.Lng, r.HasLng, p.Lat, p.HasLat, p.Lng, p.HasLng)
				break
			}
		}
	}
}
