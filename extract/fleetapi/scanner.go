package fleetapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unsafe"
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
// located DecodeError.
type syntaxError struct{ msg string }

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
// insignificant whitespace.
func (s *scanner) value() ([]byte, bool, error) {
	for {
		end, space, err := scanValue(s.buf[:s.end], s.pos, 0)
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
			return syntaxf("value larger than the %d bytes this request may return", max)
		}
		*dst = append(*dst, b...)
		return nil
	}
	switch {
	case c == '{' || c == '[' || c == '"':
		depth := 0
		inStr, esc := false, false
		for {
			start := s.pos
			for i := s.pos; i < s.end; i++ {
				c := s.buf[i]
				if inStr {
					switch {
					case esc:
						esc = false
					case c == '\\':
						esc = true
					case c == '"':
						inStr = false
						if depth == 0 {
							s.pos = i + 1
							return keep(s.buf[start:s.pos])
						}
					}
					continue
				}
				switch c {
				case '"':
					inStr = true
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

// scanValue validates the JSON value starting at b[i] and returns the index
// just past it and whether it holds insignificant whitespace. It returns
// errShort when b ends before the value does. Besides JSON it accepts the
// bare tokens NaN, Infinity and -Infinity wherever a number may stand (see
// tokNaN).
func scanValue(b []byte, i int, depth int) (int, bool, error) {
	if i >= len(b) {
		return i, false, errShort
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return i, false, syntaxf("nesting deeper than %d", maxDepth)
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		space := false
		i++
		var sp bool
		if i, sp = skipSpace(b, i); sp {
			space = true
		}
		if i >= len(b) {
			return i, space, errShort
		}
		if b[i] == closer {
			return i + 1, space, nil
		}
		for {
			if closer == '}' {
				if b[i] != '"' {
					return i, space, syntaxf("expected an object key, found %q", b[i])
				}
				var err error
				if i, err = scanString(b, i); err != nil {
					return i, space, err
				}
				if i, sp = skipSpace(b, i); sp {
					space = true
				}
				if i >= len(b) {
					return i, space, errShort
				}
				if b[i] != ':' {
					return i, space, syntaxf("expected ':' after an object key, found %q", b[i])
				}
				if i, sp = skipSpace(b, i+1); sp {
					space = true
				}
			}
			var err error
			if i, sp, err = scanValue(b, i, depth+1); err != nil {
				return i, space, err
			}
			if sp {
				space = true
			}
			if i, sp = skipSpace(b, i); sp {
				space = true
			}
			if i >= len(b) {
				return i, space, errShort
			}
			switch b[i] {
			case ',':
				if i, sp = skipSpace(b, i+1); sp {
					space = true
				}
				if i >= len(b) {
					return i, space, errShort
				}
				continue
			case closer:
				return i + 1, space, nil
			default:
				return i, space, syntaxf("expected ',' or %q, found %q", closer, b[i])
			}
		}
	case c == '"':
		j, err := scanString(b, i)
		return j, false, err
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	case c == 'N':
		return scanLiteral(b, i, tokNaN)
	case c == 'I':
		return scanLiteral(b, i, tokInf)
	case c == '-' && i+1 < len(b) && b[i+1] == 'I':
		return scanLiteral(b, i, tokNegInf)
	case c == '-' || c >= '0' && c <= '9':
		j, err := scanNumber(b, i)
		return j, false, err
	default:
		return i, false, syntaxf("unexpected %q where a value should start", c)
	}
}

func skipSpace(b []byte, i int) (int, bool) {
	start := i
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i, i > start
}

func scanLiteral(b []byte, i int, lit string) (int, bool, error) {
	if len(b)-i < len(lit) {
		if string(b[i:]) == lit[:len(b)-i] {
			return i, false, errShort
		}
		return i, false, syntaxf("invalid literal, expected %s", lit)
	}
	if string(b[i:i+len(lit)]) != lit {
		return i, false, syntaxf("invalid literal, expected %s", lit)
	}
	return i + len(lit), false, nil
}

// scanString validates the string starting at b[i] (a '"') and returns the
// index past its closing quote.
func scanString(b []byte, i int) (int, error) {
	i++
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(b) {
				return i, errShort
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return i, errShort
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return i, syntaxf("invalid \\u escape in a string")
					}
				}
				i += 6
			default:
				return i, syntaxf("invalid escape \\%c in a string", b[i+1])
			}
		case c < 0x20:
			return i, syntaxf("control character %#x in a string", c)
		default:
			i++
		}
	}
	return i, errShort
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber validates the JSON number starting at b[i] and returns the index
// past it. Reaching the end of b is errShort, since more digits may follow.
func scanNumber(b []byte, i int) (int, error) {
	n := len(b)
	if b[i] == '-' {
		i++
		if i >= n {
			return i, errShort
		}
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case c >= '1' && c <= '9':
		i++
		for i < n && b[i]-'0' <= 9 {
			i++
		}
	default:
		return i, syntaxf("invalid number")
	}
	if i >= n {
		return i, errShort
	}
	if b[i] == '.' {
		i++
		start := i
		for i < n && b[i]-'0' <= 9 {
			i++
		}
		if i >= n {
			return i, errShort
		}
		if i == start {
			return i, syntaxf("invalid number: no digit after the decimal point")
		}
	}
	if b[i] == 'e' || b[i] == 'E' {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		for i < n && b[i]-'0' <= 9 {
			i++
		}
		if i >= n {
			return i, errShort
		}
		if i == start {
			return i, syntaxf("invalid number: no digit in the exponent")
		}
	}
	return i, nil
}

// readFloat reads the number at the current position. A plain decimal of up
// to 15 significant digits that ends inside the window is parsed while it is
// scanned (exactly, see parseFloat); anything else takes the general path.
func (s *scanner) readFloat() (float64, error) {
	b := s.buf[s.pos:s.end]
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		neg, i = true, 1
	}
	var mant uint64
	nd := 0
	for i < len(b) && b[i]-'0' <= 9 {
		mant = mant*10 + uint64(b[i]-'0')
		i++
		nd++
	}
	frac := 0
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			mant = mant*10 + uint64(b[i]-'0')
			i++
		}
		frac = i - start
		nd += frac
		if frac == 0 {
			nd = 0 // "1." is not JSON; let the general path judge
		}
	}
	if i < len(b) && !numChars[b[i]] && nd > 0 && nd <= 15 {
		s.pos += i
		f := float64(mant)
		if frac > 0 {
			f /= pow10[frac]
		}
		if neg {
			f = -f
		}
		return f, nil
	}
	tok, err := s.number()
	if err != nil {
		return 0, err
	}
	return parseFloat(tok)
}

// readMillis reads the timestamp at the current position: integers of up to
// 18 digits that end inside the window are parsed while scanned.
func (s *scanner) readMillis() (int64, error) {
	b := s.buf[s.pos:s.end]
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		neg, i = true, 1
	}
	var v int64
	start := i
	for i < len(b) && b[i]-'0' <= 9 {
		v = v*10 + int64(b[i]-'0')
		i++
	}
	if nd := i - start; i < len(b) && !numChars[b[i]] && nd > 0 && nd <= 18 {
		s.pos += i
		if neg {
			v = -v
		}
		return v, nil
	}
	tok, err := s.number()
	if err != nil {
		return 0, err
	}
	return parseMillis(tok)
}

// appendCompact appends the valid JSON value v without the whitespace outside
// its strings.
func appendCompact(dst, v []byte) []byte {
	inStr, esc := false, false
	start := 0
	for i, c := range v {
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case ' ', '\t', '\n', '\r':
			dst = append(dst, v[start:i]...)
			start = i + 1
		}
	}
	return append(dst, v[start:]...)
}

// pow10 holds the powers of ten that are exact in a float64.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseFloat reads a JSON number. Plain decimals of up to 15 significant
// digits take an exact fast path (an integer mantissa below 2^53 divided by
// an exact power of ten is correctly rounded); everything else goes to
// strconv.
func parseFloat(b []byte) (float64, error) {
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		neg, i = true, 1
	}
	var mant uint64
	digits, frac, dot := 0, 0, false
	for ; i < len(b); i++ {
		c := b[i]
		if c >= '0' && c <= '9' {
			mant = mant*10 + uint64(c-'0')
			digits++
			if dot {
				frac++
			}
			continue
		}
		if c == '.' && !dot {
			dot = true
			continue
		}
		return parseFloatSlow(b)
	}
	if digits == 0 || digits > 15 || (dot && frac == 0) {
		return parseFloatSlow(b)
	}
	f := float64(mant)
	if frac > 0 {
		f /= pow10[frac]
	}
	if neg {
		f = -f
	}
	return f, nil
}

func parseFloatSlow(b []byte) (float64, error) {
	if len(b) == 0 {
		return 0, syntaxf("empty number")
	}
	// The window is not modified while ParseFloat runs, and ParseFloat
	// copies the string before keeping it in an error.
	f, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 64)
	if err != nil {
		return 0, syntaxf("invalid number %q", b)
	}
	return f, nil
}

// parseMillis reads a timestamp: a JSON integer, or any number form whose
// value is a whole number within int64.
func parseMillis(b []byte) (int64, error) {
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		neg, i = true, 1
	}
	if n := len(b) - i; n > 0 && n <= 18 {
		var v int64
		ok := true
		for ; i < len(b); i++ {
			c := b[i]
			if c < '0' || c > '9' {
				ok = false
				break
			}
			v = v*10 + int64(c-'0')
		}
		if ok {
			if neg {
				v = -v
			}
			return v, nil
		}
	}
	f, err := parseFloatSlow(b)
	if err != nil {
		return 0, err
	}
	if f < -9.2e18 || f > 9.2e18 {
		return 0, syntaxf("timestamp %s is out of range for POSIX milliseconds", b)
	}
	if f != math.Trunc(f) {
		return 0, syntaxf("timestamp %s is not a whole number of milliseconds", b)
	}
	return int64(f), nil
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
		c, err := s.peek()
		if err != nil {
			return err
		}
		s.pos++
		switch c {
		case ',':
		case '}':
			return nil
		default:
			return syntaxf("expected ',' or '}' in an object, found %q", c)
		}
	}
}
