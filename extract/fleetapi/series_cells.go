package fleetapi

import (
	"errors"
)

// millisCell reads a timestamp cell; ok is false for null.
func (d *seriesDecoder) millisCell() (int64, bool, error) {
	c, err := d.s.peek()
	if err != nil {
		return 0, false, err
	}
	if c == 'n' {
		return 0, false, d.s.literal("null")
	}
	if c >= '0' && c <= '9' {
		v, err := d.s.readMillis()
		return v, err == nil, err
	}
	tok, err := d.s.nonFiniteToken()
	if err != nil {
		return 0, false, err
	}
	if tok != "" || c != '-' {
		return 0, false, d.s.notNumber("a timestamp", c)
	}
	v, err := d.s.readMillis()
	return v, err == nil, err
}

// floatCell reads a value cell; ok is false for null. NaN, Infinity and
// -Infinity give the non-finite floats.
func (d *seriesDecoder) floatCell() (float64, bool, error) {
	c, err := d.s.peek()
	if err != nil {
		return 0, false, err
	}
	if c == 'n' {
		return 0, false, d.s.literal("null")
	}
	if c >= '0' && c <= '9' {
		v, err := d.s.readFloat()
		return v, err == nil, err
	}
	tok, err := d.s.nonFiniteToken()
	if err != nil {
		return 0, false, err
	}
	if tok != "" {
		if err := d.s.literal(tok); err != nil {
			return 0, false, err
		}
		return nonFiniteValue(tok), true, nil
	}
	if c != '-' {
		return 0, false, d.s.notNumber("a value", c)
	}
	v, err := d.s.readFloat()
	return v, err == nil, err
}

// contextCell appends the compact context to dst ("{}" for null or empty);
// present is false for null.
func (d *seriesDecoder) contextCell(dst []byte) ([]byte, bool, error) {
	s := &d.s
	c, err := s.peek()
	if err != nil {
		return dst, false, err
	}
	switch c {
	case 'n':
		return append(dst, '{', '}'), false, s.literal("null")
	case '{':
		if s.pos+1 < s.end && s.buf[s.pos+1] == '}' {
			s.pos += 2
			return append(dst, '{', '}'), true, nil
		}
		v, space, err := s.value()
		if err != nil {
			var sy *syntaxError
			if errors.As(err, &sy) {
				return dst, false, syntaxf("malformed context: %s", sy.msg)
			}
			return dst, false, err
		}
		if space {
			return appendCompact(dst, v), true, nil
		}
		return append(dst, v...), true, nil
	default:
		return dst, false, syntaxf("a context must be an object or null, found %q", c)
	}
}
