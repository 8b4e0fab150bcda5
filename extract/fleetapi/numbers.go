package fleetapi

import (
	"math"
	"strconv"
	"unsafe"
)

// readFloat reads the number at the current position. A plain decimal of up
// to 15 significant digits that ends inside the window is parsed while it is
// scanned (exactly, see parseFloat); anything else takes the general path.
func (s *scanner) readFloat() (float64, error) {
	b := s.buf[s.pos:s.end]
	i, neg := minusSign(b)
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
		return decimal(mant, frac, neg), nil
	}
	return readToken(s, parseFloat)
}

// readMillis reads the timestamp at the current position: integers of up to
// 18 digits that end inside the window are parsed while scanned.
func (s *scanner) readMillis() (int64, error) {
	b := s.buf[s.pos:s.end]
	i, neg := minusSign(b)
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
	return readToken(s, parseMillis)
}

// readToken is the general path of readFloat and readMillis: it takes the
// whole number token, across window refills, and parses it.
func readToken[T int64 | float64](s *scanner, parse func([]byte) (T, error)) (T, error) {
	tok, err := s.number()
	if err != nil {
		return 0, err
	}
	return parse(tok)
}

// minusSign reports whether the number in b starts with a minus sign and
// returns the index of its first digit.
func minusSign(b []byte) (int, bool) {
	if len(b) > 0 && b[0] == '-' {
		return 1, true
	}
	return 0, false
}

// appendCompact appends the valid JSON value v without the whitespace outside
// its strings.
func appendCompact(dst, v []byte) []byte {
	var q jsonQuote
	start := 0
	for i, c := range v {
		if q.step(c) {
			continue
		}
		switch c {
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
	i, neg := minusSign(b)
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
	return decimal(mant, frac, neg), nil
}

// decimal is the value of the digits mant with the last frac of them after
// the decimal point, negated when neg: exact, and correctly rounded, for the
// mantissas below 2^53 the fast paths let through.
func decimal(mant uint64, frac int, neg bool) float64 {
	f := float64(mant)
	if frac > 0 {
		f /= pow10[frac]
	}
	if neg {
		f = -f
	}
	return f
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
	i, neg := minusSign(b)
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
