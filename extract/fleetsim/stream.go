package fleetsim

import (
	"io"
	"strconv"
	"unicode/utf8"
)

// Streaming output: rows are appended to a byte buffer with strconv and
// written out in 32 KiB pieces, never through encoding/json.

type stream struct {
	w   io.Writer
	buf []byte
	err error
	// points counts the points written, for Sim.RowsServed.
	points int64
}

func newStream(w io.Writer) *stream { return &stream{w: w, buf: make([]byte, 0, 40<<10)} }

func (s *stream) maybeFlush() {
	if len(s.buf) >= 32<<10 {
		s.flush()
	}
}

func (s *stream) flush() {
	if s.err == nil && len(s.buf) > 0 {
		_, s.err = s.w.Write(s.buf)
	}
	s.buf = s.buf[:0]
}

func appendInt(b []byte, i int64) []byte { return strconv.AppendInt(b, i, 10) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal, keeping UTF-8 as is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			if c < utf8.RuneSelf {
				i++
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				b = append(b, s[start:i]...)
				if r == utf8.RuneError {
					b = append(b, `\ufffd`...)
				} else {
					b = append(b, `\u202`...)
					b = append(b, hexDigits[r&0xf])
				}
				i += size
				start = i
				continue
			}
			i += size
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, `\"`...)
		case '\\':
			b = append(b, `\\`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			b = append(b, `\u00`...)
			b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func roundTo(v float64, precision int) float64 {
	if precision < 0 {
		return v
	}
	return round(v, precision)
}

// appendPointJSON appends the cursor's point as the API's data point object.
func appendPointJSON(b []byte, c *cursor, precision int) []byte {
	b = append(b, `{"timestamp":`...)
	b = appendInt(b, c.ts)
	b = append(b, `,"value":`...)
	b = appendFloat(b, roundTo(c.value(), precision))
	b = append(b, `,"context":`...)
	b = c.appendContext(b)
	b = append(b, `,"created_at":`...)
	b = appendInt(b, c.createdAt())
	return append(b, '}')
}
