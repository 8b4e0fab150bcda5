package fleetapi

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"testing"
	"testing/iotest"
)

// positionCases pin the one reading of a context's position the
// warehouse's lat and lng columns get: top-level JSON numbers only, and
// nothing at all from a context that is not one well-formed object (the
// decoders refuse it) or that holds a bare non-finite token at the top.
var positionCases = []struct {
	ctx            string
	lat, lng       float64
	hasLat, hasLng bool
	// refused: no decoder hands over a point with this context.
	refused bool
}{
	{ctx: `{}`},
	{ctx: `null`},
	{ctx: `{"lat":1.5,"lng":-2}`, lat: 1.5, lng: -2, hasLat: true, hasLng: true},
	{ctx: `{"lat":48.137154,"lng":11.576124}`, lat: 48.137154, lng: 11.576124, hasLat: true, hasLng: true},
	{ctx: `{"lng":-0.5,"lat":-33.5e0}`, lat: -33.5, lng: -0.5, hasLat: true, hasLng: true},
	{ctx: `{"lng":3e2,"x":{"lat":9},"lat":-0.25}`, lat: -0.25, lng: 300, hasLat: true, hasLng: true},
	{ctx: `{"pos":{"lat":1,"lng":2}}`},
	{ctx: `{"x":[{"lat":1}],"lat":3}`, lat: 3, hasLat: true},
	{ctx: `{"lat":"1.5","lng":null}`},
	{ctx: `{"lat":"48.1","lng":11}`, lng: 11, hasLng: true},
	{ctx: `{"lat":null,"lng":true}`},
	{ctx: `{"a":[1,{"b":"}"}],"lat":4}`, lat: 4, hasLat: true},
	{ctx: `{ "lat" : 7 , "lng" : 8 }`, lat: 7, lng: 8, hasLat: true, hasLng: true},
	{ctx: "{\n\t\"lat\": 7,\r\n\"lng\": 8\n}", lat: 7, lng: 8, hasLat: true, hasLng: true},
	{ctx: `{"lat":-0,"lng":0.000001}`, lat: math.Copysign(0, -1), lng: 0.000001, hasLat: true, hasLng: true},
	{ctx: `{"lat":12345678901234567890,"lng":1.0000000000000002}`, lat: 12345678901234567890, lng: 1.0000000000000002, hasLat: true, hasLng: true},
	// A repeated key: the last number wins; a later value that is not a
	// number leaves the earlier one.
	{ctx: `{"lat":1,"lat":2}`, lat: 2, hasLat: true},
	{ctx: `{"lat":1,"lat":"x"}`, lat: 1, hasLat: true},
	// An escaped key is another key, never "lat".
	{ctx: `{"la\u0074":1}`},
	{ctx: `{"lat\"":1,"\"lng":2}`},
	// Out of float64's range: no position rather than ±Inf.
	{ctx: `{"lat":1e400,"lng":2}`, lng: 2, hasLng: true},
	{ctx: `{"lat":1,"lat":-1e400}`, lat: 1, hasLat: true},
	// Not one well-formed object: the decoders refuse the context.
	{ctx: `{"lat":1`, refused: true},
	{ctx: `{"lat":1,`, refused: true},
	{ctx: `[1,2]`, refused: true},
	{ctx: `{"lat":1 "lng":2}`, refused: true},
	{ctx: `{"lat":1}x`, refused: true},
	{ctx: `{"lat":01}`, refused: true},
	// The decoders keep non-finite tokens in a context verbatim; at the
	// top level they make it not JSON, so it yields no position at all.
	{ctx: `{"lat":-Infinity,"lng":NaN}`},
	{ctx: `{"a":NaN,"lat":-1.5,"lng":2}`},
	{ctx: `{"lat":-1.5,"lng":2,"a":Infinity}`},
	// Deeper, they are skipped like any nested value.
	{ctx: `{"a":[NaN,-Infinity],"lat":-1.5,"lng":2}`, lat: -1.5, lng: 2, hasLat: true, hasLng: true},
}

// samePosition compares positions bit for bit (so -0 is not 0).
func samePosition(p Point, lat, lng float64, hasLat, hasLng bool) bool {
	return math.Float64bits(p.Lat) == math.Float64bits(lat) && math.Float64bits(p.Lng) == math.Float64bits(lng) &&
		p.HasLat == hasLat && p.HasLng == hasLng
}

// pointSink keeps the points a decoder hands over, contexts copied.
type pointSink struct{ points []Point }

func (s *pointSink) Point(_ int, p Point) error {
	p.Context = bytes.Clone(p.Context)
	s.points = append(s.points, p)
	return nil
}

func (s *pointSink) EndFrame(int, int) error { return nil }

// TestDecodersReadThePosition runs each case through every decoder that
// hands over points: the raw series (per-variable frames and the joined
// frame, read whole and a byte at a time, so that a context cut by the
// window is scanned again), the JSON values list and the values CSV.
func TestDecodersReadThePosition(t *testing.T) {
	req := SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t0}
	for _, c := range positionCases {
		bodies := map[string]string{
			"per-variable": fmt.Sprintf(`{"columns":[["timestamp","v1.value.value","v1.value.context"]],"results":[[[%d,1,%s]]]}`, t0, c.ctx),
			"joined":       fmt.Sprintf(`{"columns":["timestamp","v1.value.value","v1.value.context"],"results":[[%d,1,%s]]}`, t0, c.ctx),
		}
		for mode, body := range bodies {
			for _, oneByte := range []bool{false, true} {
				var r io.Reader = bytes.NewReader([]byte(body))
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				var sink pointSink
				err := DecodeSeries(r, req, &sink)
				switch {
				case c.refused && err == nil:
					t.Errorf("%s, one byte %v: context %s decoded to %+v, want a DecodeError", mode, oneByte, c.ctx, sink.points)
				case c.refused:
				case err != nil || len(sink.points) != 1:
					t.Errorf("%s, one byte %v: context %s: %v, %d points", mode, oneByte, c.ctx, err, len(sink.points))
				case !samePosition(sink.points[0], c.lat, c.lng, c.hasLat, c.hasLng):
					p := sink.points[0]
					t.Errorf("%s, one byte %v: context %s gives %v %v %v %v, want %v %v %v %v", mode, oneByte, c.ctx,
						p.Lat, p.Lng, p.HasLat, p.HasLng, c.lat, c.lng, c.hasLat, c.hasLng)
				}
			}
		}

		// The JSON values list keeps a malformed context as "{}".
		p, ok := valueJSON{Timestamp: "1", Value: "1", Context: []byte(c.ctx)}.point()
		if want := !c.refused; !ok || !samePosition(p, c.lat, c.lng, c.hasLat && want, c.hasLng && want) {
			t.Errorf("values list: context %s gives %v %v %v %v, want %v %v %v %v", c.ctx,
				p.Lat, p.Lng, p.HasLat, p.HasLng, c.lat, c.lng, c.hasLat && want, c.hasLng && want)
		}

		var at position
		_, _, err := pythonBytesJSON(nil, nil, "b'"+c.ctx+"'", &at)
		p = at.point(0, 0, nil)
		switch {
		case c.refused && err == nil:
			t.Errorf("values CSV: context %s read, want an error", c.ctx)
		case c.refused:
		case err != nil || !samePosition(p, c.lat, c.lng, c.hasLat, c.hasLng):
			t.Errorf("values CSV: context %s gives %v %v %v %v (%v), want %v %v %v %v", c.ctx,
				p.Lat, p.Lng, p.HasLat, p.HasLng, err, c.lat, c.lng, c.hasLat, c.hasLng)
		}
	}
}

// The position is read in the scan that validates the context, without
// allocating: a quarter of a typical fleet's points are positions.
func TestReadingThePositionDoesNotAllocate(t *testing.T) {
	ctx := []byte(`{"lat":48.137154,"lng":11.576124,"speed":3}`)
	var at position
	if n := testing.AllocsPerRun(100, func() { _, _, _ = scanValue(ctx, 0, 0, &at) }); n != 0 {
		t.Errorf("scanning a context for its position allocates %v times per call", n)
	}
	if !at.hasLat || !at.hasLng {
		t.Errorf("no position read from %s", ctx)
	}
}

// checkPosition fails t unless p's position is what referenceLatLng reads
// in its context and no coordinate is set without its flag.
func checkPosition(t *testing.T, p Point) {
	t.Helper()
	if !p.HasLat && p.Lat != 0 || !p.HasLng && p.Lng != 0 {
		t.Fatalf("a coordinate without its flag: %v %v %v %v", p.Lat, p.Lng, p.HasLat, p.HasLng)
	}
	lat, lng, hasLat, hasLng := referenceLatLng(p.Context)
	if !samePosition(p, lat, lng, hasLat, hasLng) {
		t.Fatalf("context %s gives %v %v %v %v, the reference reading %v %v %v %v", p.Context,
			p.Lat, p.Lng, p.HasLat, p.HasLng, lat, lng, hasLat, hasLng)
	}
}

// FuzzContextPosition feeds a context cell to the raw-series decoder, whole
// and a byte at a time: every context it hands over carries the position
// the reference reading finds in it.
func FuzzContextPosition(f *testing.F) {
	for _, c := range positionCases {
		f.Add([]byte(c.ctx), false)
	}
	f.Add([]byte(`{"lat":"x","lng":{"a":[1]}}`), true)
	f.Add([]byte(`{"a":NaN,"lat":-1.5}`), true)
	f.Fuzz(func(t *testing.T, ctx []byte, oneByte bool) {
		req := SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t0}
		body := fmt.Appendf(nil, `{"columns":[["timestamp","v1.value.value","v1.value.context"]],"results":[[[%d,1,%s]]]}`, t0, ctx)
		var r io.Reader = bytes.NewReader(body)
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		var sink pointSink
		if err := DecodeSeries(r, req, &sink); err != nil {
			return
		}
		for _, p := range sink.points {
			checkPosition(t, p)
		}
	})
}

// referenceLatLng is the reading of a compact context's position that
// extract/fleet did in a second scan of every context until the decoders
// took it over (issue 36); kept unchanged as the oracle of the fuzz
// targets, so that moving the reading into the decoders' scan changed
// nothing the warehouse gets.
func referenceLatLng(ctx []byte) (lat, lng float64, hasLat, hasLng bool) {
	if len(ctx) <= 2 {
		return 0, 0, false, false
	}
	s := refScanner{b: ctx}
	s.ws()
	if !s.eat('{') {
		return 0, 0, false, false
	}
	for {
		s.ws()
		if s.eat('}') {
			return lat, lng, hasLat, hasLng
		}
		key, plain, ok := s.str()
		if !ok {
			return 0, 0, false, false
		}
		s.ws()
		if !s.eat(':') {
			return 0, 0, false, false
		}
		s.ws()
		isLat, isLng := plain && string(key) == "lat", plain && string(key) == "lng"
		start := s.i
		num, ok := s.value()
		if !ok {
			return 0, 0, false, false
		}
		if num && (isLat || isLng) {
			f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
			if err == nil {
				if isLat {
					lat, hasLat = f, true
				} else {
					lng, hasLng = f, true
				}
			}
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			return lat, lng, hasLat, hasLng
		}
		return 0, 0, false, false
	}
}

type refScanner struct {
	b []byte
	i int
}

func (s *refScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *refScanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *refScanner) str() (raw []byte, plain bool, ok bool) {
	if !s.eat('"') {
		return nil, false, false
	}
	start := s.i
	plain = true
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			plain = false
			s.i += 2
		case '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, plain, true
		default:
			s.i++
		}
	}
	return nil, false, false
}

func (s *refScanner) value() (number bool, ok bool) {
	if s.i >= len(s.b) {
		return false, false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, _, ok := s.str()
		return false, ok
	case c == '{' || c == '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, _, ok := s.str(); !ok {
					return false, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return false, true
				}
			}
			s.i++
		}
		return false, false
	case c == '-' || (c >= '0' && c <= '9'):
		for s.i < len(s.b) {
			switch c := s.b[s.i]; {
			case c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9'):
				s.i++
			default:
				return true, true
			}
		}
		return true, true
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return false, true
			}
		}
		return false, false
	}
}
