package fleet

import "strconv"

// LatLng extracts the top-level "lat" and "lng" members of a compact JSON
// context object when they are numbers. It scans the object once without
// allocating, because a quarter of a typical fleet's points are positions and
// a general JSON decoder would cost more than the rest of the row.
// Anything that is not a well-formed object yields no position.
func LatLng(ctx []byte) (lat, lng float64, hasLat, hasLng bool) {
	if len(ctx) <= 2 {
		return 0, 0, false, false
	}
	s := scanner{b: ctx}
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

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string and returns its raw bytes; plain is false when it holds
// escapes (such a key is never "lat" or "lng" as written by any sane encoder,
// and treating it as another key is the safe side).
func (s *scanner) str() (raw []byte, plain bool, ok bool) {
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

// value skips one JSON value and reports whether it was a number.
func (s *scanner) value() (number bool, ok bool) {
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
