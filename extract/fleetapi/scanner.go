package fleetapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// The scanner is a single-pass JSON tokenizer over a sliding byte window of
// an io.Reader. Tokens that the decoders read (numbers, short strings, context
// objects) are returned as slices of the window, valid only until the next
// scanner call; values the decoders do not need are skipped (or copied) in a
// streaming fashion without ever being held whole.

const (
	// scanWindow is the initial window size.
	scanWindow = 64 << 10
	// maxToken bounds a single token that must be contiguous (a context
	// object, a column name); the window never grows past it.
	maxToken = 64 << 20
	// maxDepth bounds nesting inside a JSON value.
	maxDepth = 1000
)

// errShort says that a value runs past the end of the window; the caller
// reads more input and scans again.
var errShort = errors.New("value runs past the window")

// syntaxError is malformed or unexpected JSON; the decoder turns it into a
// located DecodeError. tooLarge marks a value walk refused to keep because
// it exceeded its bound, which the raw-series decoder reports on its own
// (TooLargeError).
type syntaxError struct {
	msg      string
	tooLarge bool
}

func (e *syntaxError) Error() string { return e.msg }

func syntaxf(format string, args ...any) error {
	return &syntaxError{msg: fmt.Sprintf(format, args...)}
}

type scanner struct {
	r        io.Reader
	buf      []byte
	pos, end int
	// base is the stream offset of buf[0].
	base int64
	// done says no more input will come; rerr is why, when not io.EOF.
	done bool
	rerr error
}

// reset makes s scan r, reusing its window.
func (s *scanner) reset(r io.Reader) {
	if cap(s.buf) < scanWindow {
		s.buf = make([]byte, scanWindow)
	}
	s.buf = s.buf[:cap(s.buf)]
	s.r, s.pos, s.end, s.base, s.done, s.rerr = r, 0, 0, 0, false, nil
}

// resetBytes makes s scan b, which must not change while s uses it.
func (s *scanner) resetBytes(b []byte) {
	s.r, s.buf, s.pos, s.end, s.base, s.done, s.rerr = nil, b, 0, len(b), 0, true, nil
}

// offset is the stream offset of the next unread byte.
func (s *scanner) offset() int64 { return s.base + int64(s.pos) }

// fill reads more input, keeping buf[pos:end] (moved to the front). It
// reports whether new bytes arrived.
func (s *scanner) fill() bool {
	if s.done {
		return false
	}
	if s.pos > 0 {
		n := copy(s.buf, s.buf[s.pos:s.end])
		s.base += int64(s.pos)
		s.end, s.pos = n, 0
	}
	if s.end == len(s.buf) {
		if len(s.buf) >= maxToken {
			s.done, s.rerr = true, syntaxf("a single JSON token exceeds %d bytes", maxToken)
			return false
		}
		nb := make([]byte, 2*len(s.buf))
		copy(nb, s.buf[:s.end])
		s.buf = nb
	}
	for range 100 {
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		if err != nil {
			s.done = true
			if err != io.EOF {
				s.rerr = err
			}
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
	s.done, s.rerr = true, io.ErrNoProgress
	return false
}

// eofErr is the error for input that stopped before the document ended.
func (s *scanner) eofErr() error {
	if s.rerr != nil {
		return s.rerr
	}
	return io.ErrUnexpectedEOF
}

// peek skips whitespace and returns the next byte without consuming it.
func (s *scanner) peek() (byte, error) {
	for {
		for s.pos < s.end {
			c := s.buf[s.pos]
			if c == ' ' || c == '\n' || c == '\r' || c == '\t' {
				s.pos++
				continue
			}
			return c, nil
		}
		if !s.fill() {
			return 0, s.eofErr()
		}
	}
}

// expect consumes the next non-space byte, which must be c.
func (s *scanner) expect(c byte) error {
	got, err := s.peek()
	if err != nil {
		return err
	}
	if got != c {
		return syntaxf("expected %q, found %q", c, got)
	}
	s.pos++
	return nil
}

// literal consumes lit (null, true, false) at the current position.
func (s *scanner) literal(lit string) error {
	for s.end-s.pos < len(lit) {
		if !s.fill() {
			return s.eofErr()
		}
	}
	if string(s.buf[s.pos:s.pos+len(lit)]) != lit {
		return syntaxf("invalid literal, expected %s", lit)
	}
	s.pos += len(lit)
	return nil
}

// The bare tokens that Python's json module writes by default for the
// non-finite floats. They are not JSON, but a service written in Python
// sends them unless it was told not to, so the decoders take them as a
// point's value and keep them verbatim inside a context.
const (
	tokNaN    = "NaN"
	tokInf    = "Infinity"
	tokNegInf = "-Infinity"
)

// nonFiniteToken tells which of NaN, Infinity and -Infinity starts at the
// current position, "" when none does. It consumes nothing.
func (s *scanner) nonFiniteToken() (string, error) {
	for s.end-s.pos < 2 {
		if !s.fill() {
			break
		}
	}
	if s.pos >= s.end {
		return "", s.eofErr()
	}
	switch s.buf[s.pos] {
	case 'N':
		return tokNaN, nil
	case 'I':
		return tokInf, nil
	case '-':
		if s.pos+1 < s.end && s.buf[s.pos+1] == 'I' {
			return tokNegInf, nil
		}
	}
	return "", nil
}

// nonFiniteValue is the float a bare token stands for.
func nonFiniteValue(tok string) float64 {
	switch tok {
	case tokInf:
		return math.Inf(1)
	case tokNegInf:
		return math.Inf(-1)
	default:
		return math.NaN()
	}
}

// notNumber is the error for a cell (what: "a value", "a timestamp") that
// holds something other than a number, c being its first byte; a string is
// quoted in the message, clipped.
func (s *scanner) notNumber(what string, c byte) error {
	found := fmt.Sprintf("%q", c)
	switch c {
	case '"':
		if str, err := s.stringValue(); err == nil {
			found = fmt.Sprintf("the string %q", clip(str, 40))
		} else {
			found = "a string"
		}
	case '{':
		found = "an object"
	case '[':
		found = "an array"
	case 't', 'f':
		found = "a boolean"
	case 'N', 'I', '-':
		found = "a non-finite number"
	}
	return syntaxf("%s must be a number, found %s", what, found)
}

// numChars are the bytes a JSON number may hold.
var numChars = [256]bool{'0': true, '1': true, '2': true, '3': true, '4': true, '5': true,
	'6': true, '7': true, '8': true, '9': true, '-': true, '+': true, '.': true, 'e': true, 'E': true}

// number returns the bytes of the number at the current position.
func (s *scanner) number() ([]byte, error) {
	for {
		i := s.pos
		for i < s.end && numChars[s.buf[i]] {
			i++
		}
		if i < s.end || s.done {
			if s.rerr != nil && i == s.end {
				return nil, s.rerr
			}
			if i == s.pos {
				if i == s.end {
					return nil, s.eofErr()
				}
				return nil, syntaxf("expected a number, found %q", s.buf[i])
			}
			tok := s.buf[s.pos:i]
			s.pos = i
			return tok, nil
		}
		s.fill()
	}
}

// str consumes the string at the current position (which must be '"') and
// returns its raw content without the quotes, escapes left in, and whether it
// has escapes.
func (s *scanner) str() ([]byte, bool, error) {
	for {
		i := s.pos + 1
		esc := false
		for i < s.end {
			c := s.buf[i]
			if c == '\\' {
				esc = true
				i += 2
				continue
			}
			if c == '"' {
				tok := s.buf[s.pos+1 : i]
				s.pos = i + 1
				return tok, esc, nil
			}
			if c < 0x20 {
				return nil, false, syntaxf("control character %#x in a string", c)
			}
			i++
		}
		if !s.fill() {
			return nil, false, s.eofErr()
		}
	}
}

// stringValue consumes a JSON string and returns it decoded.
func (s *scanner) stringValue() (string, error) {
	c, err := s.peek()
	if err != nil {
		return "", err
	}
	if c != '"' {
		return "", syntaxf("expected a string, found %q", c)
	}
	raw, esc, err := s.str()
	if err != nil {
		return "", err
	}
	if !esc {
		return string(raw), nil
	}
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	var out string
	if err := json.Unmarshal(quoted, &out); err != nil {
		return "", syntaxf("invalid string escape: %v", err)
	}
	return out, nil
}

// value consumes one whole JSON value at the current position, validating
// it, and returns it as a window slice together with whether it holds
// insignificant whitespace. When at is not nil, the position of the object
// (a point's context) is read into *at in the same pass (scanValue).
func (s *scanner) value(at *position) ([]byte, bool, error) {
	for {
		end, space, err := scanValue(s.buf[:s.end], s.pos, 0, at)
		if err == nil {
			v := s.buf[s.pos:end]
			s.pos = end
			return v, space, nil
		}
		if err != errShort {
			return nil, false, err
		}
		if !s.fill() {
			return nil, false, s.eofErr()
		}
	}
}

// walk consumes one JSON value of any size in a streaming fashion, appending
// its bytes to *dst when dst is not nil. It checks only the structure needed
// to find the value's end; a captured value is validated when decoded later.
// max bounds len(*dst).
func (s *scanner) walk(dst *[]byte, max int) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	keep := func(b []byte) error {
		if dst == nil {
			return nil
		}
		if len(*dst)+len(b) > max {
			return &syntaxError{msg: fmt.Sprintf("value larger than the %d bytes this request may return", max), tooLarge: true}
		}
		*dst = append(*dst, b...)
		return nil
	}
	switch {
	case c == '{' || c == '[' || c == '"':
		depth := 0
		var q jsonQuote
		for {
			start := s.pos
			for i := s.pos; i < s.end; i++ {
				c := s.buf[i]
				if q.step(c) {
					// A string's closing quote ends the value when
					// it is the whole value.
					if !q.in && depth == 0 {
						s.pos = i + 1
						return keep(s.buf[start:s.pos])
					}
					continue
				}
				switch c {
				case '{', '[':
					depth++
					if depth > maxDepth {
						return syntaxf("nesting deeper than %d", maxDepth)
					}
				case '}', ']':
					depth--
					if depth == 0 {
						s.pos = i + 1
						return keep(s.buf[start:s.pos])
					}
					if depth < 0 {
						return syntaxf("unbalanced %q", c)
					}
				}
			}
			if err := keep(s.buf[start:s.end]); err != nil {
				return err
			}
			s.pos = s.end
			if !s.fill() {
				return s.eofErr()
			}
		}
	case numChars[c] || c == 't' || c == 'f' || c == 'n' || c == 'N' || c == 'I':
		for {
			start := s.pos
			i := s.pos
			for i < s.end && (numChars[s.buf[i]] || s.buf[i] >= 'a' && s.buf[i] <= 'z' || s.buf[i] >= 'A' && s.buf[i] <= 'Z') {
				i++
			}
			if err := keep(s.buf[start:i]); err != nil {
				return err
			}
			s.pos = i
			if i < s.end {
				return nil
			}
			if !s.fill() {
				if s.rerr != nil {
					return s.rerr
				}
				return nil
			}
		}
	default:
		return syntaxf("unexpected %q where a value should start", c)
	}
}

// firstElement consumes the '[' of the array at the current position and
// reports whether an element follows; an empty array is consumed whole.
// With nextElement it iterates an array in place:
//
//	more, err := s.firstElement()
//	for more && err == nil {
//		// read one element
//		more, err = s.nextElement("between rows")
//	}
//
// The decoders' row and cell loops use them directly; arrayElements wraps
// them for the loops that run once per response, where a closure per
// element costs nothing that shows (per cell, it costs ~15 % of decoding).
func (s *scanner) firstElement() (bool, error) {
	if err := s.expect('['); err != nil {
		return false, err
	}
	return s.firstAfterOpen()
}

// firstAfterOpen is firstElement for an array whose '[' is consumed.
func (s *scanner) firstAfterOpen() (bool, error) {
	c, err := s.peek()
	if err != nil {
		return false, err
	}
	if c == ']' {
		s.pos++
		return false, nil
	}
	return true, nil
}

// nextElement consumes the separator after an element and reports whether
// another follows; where completes the syntax error for a bad separator
// ("between rows" gives "expected ',' or ']' between rows").
func (s *scanner) nextElement(where string) (bool, error) {
	done, err := separator(s, ']', where)
	return !done && err == nil, err
}

// arrayElements reads the array at the current position, calling element
// with the scanner at each element.
func arrayElements(s *scanner, where string, element func() error) error {
	more, err := s.firstElement()
	for more && err == nil {
		if err = element(); err != nil {
			return err
		}
		more, err = s.nextElement(where)
	}
	return err
}

// elementsAfterOpen is arrayElements for an array whose '[' is consumed.
func elementsAfterOpen(s *scanner, where string, element func() error) error {
	more, err := s.firstAfterOpen()
	for more && err == nil {
		if err = element(); err != nil {
			return err
		}
		more, err = s.nextElement(where)
	}
	return err
}

// separator reads what follows an element of an array or object: ',' or
// the closing byte, when done is true.
func separator(s *scanner, closing byte, where string) (done bool, err error) {
	c, err := s.peek()
	if err != nil {
		return false, err
	}
	s.pos++
	switch c {
	case ',':
		return false, nil
	case closing:
		return true, nil
	}
	return false, syntaxf("expected ',' or '%c' %s, found %q", closing, where, c)
}

// objectMembers reads the members of the object at the current position,
// calling member with the scanner on each value.
func objectMembers(s *scanner, member func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.stringValue()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		if done, err := separator(s, '}', "in an object"); done || err != nil {
			return err
		}
	}
}
