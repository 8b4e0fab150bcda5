package fleetsim

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// GET values.

func parseQueryInt(q url.Values, key string) (*int64, bool) {
	v, present := q[key]
	if !present || len(v) == 0 || v[0] == "" {
		return nil, true
	}
	i, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		return nil, false
	}
	return &i, true
}

func (s *Sim) getValues(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	q := r.URL.Query()
	vs, ok := s.snapVar(p[0])
	if !ok {
		errNotFound(w)
		return
	}
	format := strings.ToLower(q.Get("format"))
	csv := format == "csv"
	if format != "" && format != "json" && !csv {
		errSchema(w, "ValuesQuerySchema", fmt.Sprintf("format: %q is not one of the accepted values: json, csv.", format))
		return
	}
	start, ok1 := parseQueryInt(q, "start")
	end, ok2 := parseQueryInt(q, "end")
	if !ok1 || !ok2 {
		errSchema(w, "ValuesQuerySchema", "start and end must be integers (POSIX milliseconds).")
		return
	}
	if start != nil && end != nil && *start > *end {
		errSchema(w, "ValuesQuerySchema", "start must not be after end.")
		return
	}
	floor := s.floorMs()
	if (start != nil && *start < floor) || (end != nil && *end < floor) {
		errRetention(w, csv)
		return
	}
	lo, hi := floor, int64(maxTs)
	if start != nil {
		lo = *start
	}
	if end != nil {
		hi = *end
	}
	c := vs.ser.cursor(lo, hi)
	pageSize := -1
	if v, err := strconv.Atoi(q.Get("page_size")); err == nil && v > 0 {
		pageSize = v
	}
	if csv {
		s.writeCSV(w, vs, &c, pageSize)
		return
	}
	if pageSize < 0 {
		pageSize = 100 // the last 100 points by default
	}
	num := 1
	if ps := q.Get("page"); ps != "" {
		v, err := strconv.Atoi(ps)
		if err != nil || v < 1 {
			errInvalidPage(w)
			return
		}
		num = v
	}
	total := c.remaining()
	pages := max(1, (total+pageSize-1)/pageSize)
	if num > pages {
		errInvalidPage(w)
		return
	}
	for k := (num - 1) * pageSize; k > 0 && c.next(); k-- {
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	st := newStream(w)
	st.buf = append(st.buf, `{"count":`...)
	if s.opts.CountAsBool {
		st.buf = appendBool(st.buf, total > 0)
	} else {
		st.buf = appendInt(st.buf, int64(total))
	}
	st.buf = append(st.buf, `,"next":`...)
	if num < pages {
		st.buf = appendJSONString(st.buf, pageURL(s.baseURL(r), r, func(q url.Values) { q.Set("page", strconv.Itoa(num+1)) }))
	} else {
		st.buf = append(st.buf, "null"...)
	}
	st.buf = append(st.buf, `,"previous":`...)
	if num > 1 {
		st.buf = appendJSONString(st.buf, pageURL(s.baseURL(r), r, func(q url.Values) {
			if num == 2 {
				q.Del("page")
			} else {
				q.Set("page", strconv.Itoa(num-1))
			}
		}))
	} else {
		st.buf = append(st.buf, "null"...)
	}
	st.buf = append(st.buf, `,"results":[`...)
	for k := 0; k < pageSize && st.err == nil && c.next(); k++ {
		if k > 0 {
			st.buf = append(st.buf, ',')
		}
		st.buf = appendPointJSON(st.buf, &c, -1)
		st.maybeFlush()
	}
	st.buf = append(st.buf, "]}"...)
	st.flush()
}

// writeCSV streams the values as the service's CSV download: Timestamp, the
// UTC date, a column named after the variable's label, and the context as a
// Python bytes literal. page is ignored; page_size (limit) is honoured.
func (s *Sim) writeCSV(w http.ResponseWriter, vs *varSnap, c *cursor, limit int) {
	w.Header().Set("Content-Type", "text/csv")
	w.Header().Set("Content-Disposition", "attachment; filename=values_"+vs.id+".csv")
	w.WriteHeader(http.StatusOK)
	st := newStream(w)
	st.buf = append(st.buf, "Timestamp,Human readable date (UTC),"...)
	st.buf = appendCSVField(st.buf, []byte(vs.label))
	st.buf = append(st.buf, ",Context\r\n"...)
	var ctx, lit []byte
	for k := 0; (limit < 0 || k < limit) && st.err == nil && c.next(); k++ {
		st.buf = appendInt(st.buf, c.ts)
		st.buf = append(st.buf, ',')
		st.buf = time.UnixMilli(c.ts).UTC().AppendFormat(st.buf, "2006-01-02 15:04:05.000000+00:00")
		st.buf = append(st.buf, ',')
		st.buf = appendCSVFloat(st.buf, c.value())
		st.buf = append(st.buf, ',')
		ctx = c.appendContext(ctx[:0])
		lit = appendPyBytesLiteral(lit[:0], pythonJSON(ctx))
		st.buf = appendCSVField(st.buf, lit)
		st.buf = append(st.buf, "\r\n"...)
		st.maybeFlush()
	}
	st.flush()
}

// appendCSVFloat writes a value as the CSV download does: like appendFloat,
// but NaN and the infinities as Python's str() prints them (nan, inf, -inf).
func appendCSVFloat(b []byte, f float64) []byte {
	switch nonFiniteToken(f) {
	case "NaN":
		return append(b, "nan"...)
	case "Infinity":
		return append(b, "inf"...)
	case "-Infinity":
		return append(b, "-inf"...)
	}
	return appendFloat(b, f)
}

// appendCSVField quotes a field the way Python's csv module does by default
// (only when it holds a delimiter, a quote or a line break).
func appendCSVField(b, f []byte) []byte {
	needs := false
	for _, c := range f {
		if c == ',' || c == '"' || c == '\r' || c == '\n' {
			needs = true
			break
		}
	}
	if !needs {
		return append(b, f...)
	}
	b = append(b, '"')
	for _, c := range f {
		if c == '"' {
			b = append(b, '"')
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// pythonJSON rewrites compact JSON the way Python's json.dumps prints it:
// ", " and ": " separators and non-ASCII escaped as \uXXXX.
func pythonJSON(compact []byte) []byte {
	out := make([]byte, 0, len(compact)+16)
	var q jsonQuote
	for i := 0; i < len(compact); {
		c := compact[i]
		if q.in && !q.esc && c >= utf8.RuneSelf {
			// Inside a string, a multi-byte character becomes its
			// UTF-16 escapes (no byte of one is a quote or backslash).
			r, size := utf8.DecodeRune(compact[i:])
			for _, u := range utf16Units(r) {
				out = append(out, `\u`...)
				out = append(out, hexDigits[u>>12&0xf], hexDigits[u>>8&0xf], hexDigits[u>>4&0xf], hexDigits[u&0xf])
			}
			i += size
			continue
		}
		out = append(out, c)
		if !q.step(c) && (c == ',' || c == ':') {
			out = append(out, ' ')
		}
		i++
	}
	return out
}

func utf16Units(r rune) []uint16 {
	if r < 0x10000 {
		return []uint16{uint16(r)}
	}
	r -= 0x10000
	return []uint16{uint16(0xd800 + (r>>10)&0x3ff), uint16(0xdc00 + r&0x3ff)}
}

// appendPyBytesLiteral appends repr(bytes) as Python prints it: b'...'
// (or b"..." when only a single quote occurs), with \\, \' and \xNN escapes.
func appendPyBytesLiteral(b, data []byte) []byte {
	quote := byte('\'')
	hasSingle, hasDouble := false, false
	for _, c := range data {
		hasSingle = hasSingle || c == '\''
		hasDouble = hasDouble || c == '"'
	}
	if hasSingle && !hasDouble {
		quote = '"'
	}
	b = append(b, 'b', quote)
	for _, c := range data {
		switch {
		case c == quote || c == '\\':
			b = append(b, '\\', c)
		case c == '\t':
			b = append(b, `\t`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, quote)
}
