package fleet

import (
	"testing"
)

// TestLatLng pins the one reading of a context's position the warehouse's
// lat and lng columns get: top-level JSON numbers only, and nothing at all
// from a context that is not one well-formed object (the context column keeps
// the text either way).
func TestLatLng(t *testing.T) {
	cases := []struct {
		in             string
		lat, lng       float64
		hasLat, hasLng bool
	}{
		{`{}`, 0, 0, false, false},
		{``, 0, 0, false, false},
		{`{"lat":1.5,"lng":-2}`, 1.5, -2, true, true},
		{`{"lat":48.137154,"lng":11.576124}`, 48.137154, 11.576124, true, true},
		{`{"lng":-0.5,"lat":-33.5e0}`, -33.5, -0.5, true, true},
		{`{"lng":3e2,"x":{"lat":9},"lat":-0.25}`, -0.25, 300, true, true},
		{`{"pos":{"lat":1,"lng":2}}`, 0, 0, false, false},
		{`{"x":[{"lat":1}],"lat":3}`, 3, 0, true, false},
		{`{"lat":"1.5","lng":null}`, 0, 0, false, false},
		{`{"lat":"48.1","lng":11}`, 0, 11, false, true},
		{`{"lat":null,"lng":true}`, 0, 0, false, false},
		{`{"a":[1,{"b":"}"}],"lat":4}`, 4, 0, true, false},
		{`{ "lat" : 7 , "lng" : 8 }`, 7, 8, true, true},
		{"{\n\t\"lat\": 7,\r\n\"lng\": 8\n}", 7, 8, true, true},
		// A repeated key: the last number wins.
		{`{"lat":1,"lat":2}`, 2, 0, true, false},
		// An escaped key is another key, never "lat".
		{`{"la\u0074":1}`, 0, 0, false, false},
		// Out of float64's range: no position rather than ±Inf.
		{`{"lat":1e400,"lng":2}`, 0, 2, false, true},
		// Not one well-formed object: no position at all.
		{`{"lat":1`, 0, 0, false, false},
		{`{"lat":1,`, 0, 0, false, false},
		{`[1,2]`, 0, 0, false, false},
		{`{"lat":1 "lng":2}`, 0, 0, false, false},
		// The scan ends with the object: what follows is not read (the
		// decoders hand over one JSON value, so nothing follows).
		{`{"lat":1}x`, 1, 0, true, false},
		// The decoders keep non-finite tokens in a context verbatim; such
		// a context is not JSON, so it yields no position.
		{`{"lat":-Infinity,"lng":NaN}`, 0, 0, false, false},
		{`{"a":NaN,"lat":-1.5,"lng":2}`, 0, 0, false, false},
	}
	for _, c := range cases {
		lat, lng, hl, hg := LatLng([]byte(c.in))
		if lat != c.lat || lng != c.lng || hl != c.hasLat || hg != c.hasLng {
			t.Errorf("LatLng(%s) = %v %v %v %v, want %v %v %v %v", c.in, lat, lng, hl, hg, c.lat, c.lng, c.hasLat, c.hasLng)
		}
	}
}

func TestLatLngDoesNotAllocate(t *testing.T) {
	ctx := []byte(`{"lat":48.137154,"lng":11.576124,"speed":3}`)
	if n := testing.AllocsPerRun(100, func() { LatLng(ctx) }); n != 0 {
		t.Errorf("LatLng allocates %v times per call", n)
	}
}

func FuzzLatLng(f *testing.F) {
	f.Add([]byte(`{"lat":48.1,"lng":11.5}`))
	f.Add([]byte(`{"lat":"x","lng":{"a":[1]}}`))
	f.Add([]byte(`{"a":NaN,"lat":-1.5}`))
	f.Fuzz(func(t *testing.T, ctx []byte) {
		lat, lng, hasLat, hasLng := LatLng(ctx)
		if !hasLat && lat != 0 || !hasLng && lng != 0 {
			t.Fatalf("a value without its flag: %v %v %v %v", lat, lng, hasLat, hasLng)
		}
	})
}
