package fleetapi

// scanValue validates the JSON value starting at b[i] and returns the index
// just past it and whether it holds insignificant whitespace. It returns
// errShort when b ends before the value does. Besides JSON it accepts the
// bare tokens NaN, Infinity and -Infinity wherever a number may stand (see
// tokNaN). When at is not nil and the value is an object (a point's
// context), its position is read into *at in the same pass; at is reset
// first, so a scan retried after errShort starts afresh.
func scanValue(b []byte, i int, depth int, at *position) (int, bool, error) {
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
		if at != nil {
			*at = position{}
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
			var key []byte
			if closer == '}' {
				if b[i] != '"' {
					return i, space, syntaxf("expected an object key, found %q", b[i])
				}
				start := i
				var err error
				if i, err = scanString(b, i); err != nil {
					return i, space, err
				}
				key = b[start:i]
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
			start := i
			var err error
			if i, sp, err = scanValue(b, i, depth+1, nil); err != nil {
				return i, space, err
			}
			if sp {
				space = true
			}
			if at != nil && closer == '}' {
				at.member(key, b[start:i])
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
		var err error
		if i, err = someDigits(b, i+1, "after the decimal point"); err != nil {
			return i, err
		}
	}
	if b[i] == 'e' || b[i] == 'E' {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		return someDigits(b, i, "in the exponent")
	}
	return i, nil
}

// someDigits skips the digits from b[i], of which a fraction or an exponent
// needs at least one (where names the place for the error), and returns the
// index past them. Reaching the end of b is errShort, as in scanNumber.
func someDigits(b []byte, i int, where string) (int, error) {
	start := i
	for i < len(b) && b[i]-'0' <= 9 {
		i++
	}
	if i >= len(b) {
		return i, errShort
	}
	if i == start {
		return i, syntaxf("invalid number: no digit %s", where)
	}
	return i, nil
}
