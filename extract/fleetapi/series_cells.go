package fleetapi

import (
	"errors"
)

// cellKind is what a series cell holds, seen from its first bytes.
type cellKind uint8

const (
	cellNull      cellKind = iota // null, already consumed
	cellNumber                    // a JSON number, unread
	cellNonFinite                 // NaN, Infinity or -Infinity, unread
	cellOther                     // anything else, unread
)

// cell looks at the next cell for millisCell and floatCell, which differ
// only in how they read a number and whether a non-finite token is one.
// Unless the cell was null, the position is left at its first byte. A
// digit is a number at once, without looking for a token.
func (d *seriesDecoder) cell() (cellKind, error) {
	// The common cell, a number right at the position, costs no call to
	// peek: every point has two or three cells.
	if s := &d.s; s.pos < s.end && s.buf[s.pos]-'0' <= 9 {
		return cellNumber, nil
	}
	c, err := d.s.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c == 'n':
		return cellNull, d.s.literal("null")
	case c >= '0' && c <= '9':
		return cellNumber, nil
	}
	tok, err := d.s.nonFiniteToken()
	switch {
	case err != nil:
		return 0, err
	case tok != "":
		return cellNonFinite, nil
	case c == '-':
		return cellNumber, nil
	}
	return cellOther, nil
}

// millisCell reads a timestamp cell; ok is false for null.
func (d *seriesDecoder) millisCell() (int64, bool, error) {
	kind, err := d.cell()
	switch {
	case err != nil || kind == cellNull:
		return 0, false, err
	case kind != cellNumber:
		return 0, false, d.s.notNumber("a timestamp", d.s.buf[d.s.pos])
	}
	v, err := d.s.readMillis()
	return v, err == nil, err
}

// floatCell reads a value cell; ok is false for null. NaN, Infinity and
// -Infinity give the non-finite floats.
func (d *seriesDecoder) floatCell() (float64, bool, error) {
	kind, err := d.cell()
	switch {
	case err != nil || kind == cellNull:
		return 0, false, err
	case kind == cellNonFinite:
		// cell saw the token: asking again reads nothing more.
		tok, err := d.s.nonFiniteToken()
		if err == nil {
			err = d.s.literal(tok)
		}
		if err != nil {
			return 0, false, err
		}
		return nonFiniteValue(tok), true, nil
	case kind != cellNumber:
		return 0, false, d.s.notNumber("a value", d.s.buf[d.s.pos])
	}
	v, err := d.s.readFloat()
	return v, err == nil, err
}

// contextCell appends the compact context to dst ("{}" for null or empty)
// and reads its position into *at in the same scan; present is false for
// null.
func (d *seriesDecoder) contextCell(dst []byte, at *position) ([]byte, bool, error) {
	*at = position{}
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
		v, space, err := s.value(at)
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
