package fleetsim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Streaming output: rows are appended to a byte buffer with strconv and
// written out in 32 KiB pieces, never through encoding/json.

type stream struct {
	w   io.Writer
	buf []byte
	err error
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

// snapshotVar copies what a data read needs under the read lock, so the
// response streams without holding it.
type varSnap struct {
	id, label, name   string
	props             []byte
	devID, devLabel   string
	devName           string
	ser               series
	idJSON, labelJSON []byte
	nameJSON          []byte
	devIDJSON         []byte
	devLabelJSON      []byte
	devNameJSON       []byte
	// undecodable makes raw-series cells of this variable unreadable
	// (Faults.UndecodableVariables).
	undecodable bool
}

func (s *Sim) snapVar(id string) (*varSnap, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.vars[id]
	if !ok {
		return nil, false
	}
	props, _ := json.Marshal(v.properties)
	if v.properties == nil {
		props = []byte("{}")
	}
	return &varSnap{
		id: v.id, label: v.label, name: v.name, props: props,
		devID: v.dev.id, devLabel: v.dev.label, devName: v.dev.name, ser: v.ser,
		idJSON: appendJSONString(nil, v.id), labelJSON: appendJSONString(nil, v.label), nameJSON: appendJSONString(nil, v.name),
		devIDJSON: appendJSONString(nil, v.dev.id), devLabelJSON: appendJSONString(nil, v.dev.label), devNameJSON: appendJSONString(nil, v.dev.name),
	}, true
}

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
	inStr, esc := false, false
	for i := 0; i < len(compact); {
		c := compact[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			case c >= utf8.RuneSelf:
				r, size := utf8.DecodeRune(compact[i:])
				for _, u := range utf16Units(r) {
					out = append(out, `\u`...)
					out = append(out, hexDigits[u>>12&0xf], hexDigits[u>>8&0xf], hexDigits[u>>4&0xf], hexDigits[u&0xf])
				}
				i += size
				continue
			}
			out = append(out, c)
			i++
			continue
		}
		out = append(out, c)
		switch c {
		case '"':
			inStr = true
		case ',', ':':
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

// GET statistics.

var statFuncs = map[string]bool{"mean": true, "min": true, "max": true, "sum": true, "count": true, "first": true, "last": true, "std": true}

// aggResult is an aggregate of one variable's input series.
type aggResult struct {
	hasValue bool
	v        float64
	ts       int64
	hasTs    bool
	ctx      []byte
}

// aggregate computes fn over at most limit (-1: all) points of c, newest
// first. Timestamps: the chosen point for min, max, first, last and raw; the
// newest input point for mean, sum, count and std.
func aggregate(c *cursor, limit int, fn string) aggResult {
	var res aggResult
	var n int
	var sum, mean, m2 float64
	var newestTs int64
	for k := 0; (limit < 0 || k < limit) && c.next(); k++ {
		v := c.value()
		if n == 0 {
			newestTs = c.ts
		}
		n++
		sum += v
		d := v - mean
		mean += d / float64(n)
		m2 += d * (v - mean)
		switch fn {
		case "min":
			if n == 1 || v < res.v {
				res.v, res.ts = v, c.ts
			}
		case "max":
			if n == 1 || v > res.v {
				res.v, res.ts = v, c.ts
			}
		case "first": // the earliest input point: the last one visited
			res.v, res.ts = v, c.ts
		case "last", "raw":
			if n == 1 {
				res.v, res.ts = v, c.ts
				res.ctx = c.appendContext(nil)
			}
		}
	}
	switch fn {
	case "count":
		return aggResult{hasValue: true, v: float64(n), ts: newestTs, hasTs: n > 0}
	case "sum":
		return aggResult{hasValue: true, v: sum, ts: newestTs, hasTs: n > 0}
	}
	if n == 0 {
		return aggResult{}
	}
	switch fn {
	case "mean", "average":
		res.v, res.ts = mean, newestTs
	case "std":
		res.v, res.ts = math.Sqrt(m2/float64(n)), newestTs
	}
	res.hasValue, res.hasTs = true, true
	return res
}

func (s *Sim) getStatistics(w http.ResponseWriter, _ *http.Request, p []string, _ TokenKind) {
	vs, ok := s.snapVar(p[0])
	if !ok {
		errNotFound(w)
		return
	}
	fn := p[1]
	if !statFuncs[fn] {
		// Not implemented: 200 with an empty object, not an error.
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	start, err1 := strconv.ParseInt(p[2], 10, 64)
	end, err2 := strconv.ParseInt(p[3], 10, 64)
	if err1 != nil || err2 != nil {
		errSchema(w, "StatisticsPathSchema", "start and end must be integers (POSIX milliseconds).")
		return
	}
	if start > end {
		errSchema(w, "StatisticsPathSchema", "start must not be after end.")
		return
	}
	floor := s.floorMs()
	if start < floor || end < floor {
		errRetention(w, false)
		return
	}
	c := vs.ser.cursor(start, end)
	res := aggregate(&c, -1, fn)
	b := append([]byte("{"), appendJSONString(nil, fn)...)
	b = append(b, ':')
	if res.hasValue {
		b = appendFloat(b, res.v)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// Body schemas of the two POST endpoints.

type dataQuery struct {
	vars       []*varSnap
	join       bool
	start, end *int64
	limit      *int64
	precision  int // -1: full precision
	columns    []string
	agg        string
}

var rawColumns = []string{"value.value", "timestamp", "variable.id", "variable.label", "variable.name", "variable.properties", "value.context", "device.id", "device.name", "device.label"}

var aggNames = []string{"mean", "min", "max", "sum", "count", "first", "last", "average", "raw"}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func bodyInt(obj map[string]any, key string) (*int64, bool) {
	v, ok := obj[key]
	if !ok || v == nil {
		return nil, true
	}
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return nil, false
	}
	return &i, true
}

// parseDataQuery validates a Data API POST body against its schema and
// resolves the variables. It answers every error itself: malformed JSON
// ({detail}), schema errors ({description,status,message}), unknown
// variables (404001) and retention violations (403003).
func (s *Sim) parseDataQuery(w http.ResponseWriter, r *http.Request, schema string, raw bool) (*dataQuery, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return nil, false
	}
	obj, ok := body.(map[string]any)
	if !ok {
		errSchema(w, schema, fmt.Sprintf("_schema: Invalid input type: expected an object, got %s.", jsonTypeName(body)))
		return nil, false
	}
	q := &dataQuery{join: true, precision: -1}
	ids, ok := stringList(obj["variables"])
	if !ok || len(ids) == 0 {
		errSchema(w, schema, "variables: Must be a non-empty list of variable ids.")
		return nil, false
	}
	if v, present := obj["join_dataframes"]; present && v != nil {
		b, isBool := v.(bool)
		if !isBool {
			errSchema(w, schema, "join_dataframes: Not a valid boolean.")
			return nil, false
		}
		q.join = b
	}
	var okS, okE, okL, okP bool
	var prec *int64
	q.start, okS = bodyInt(obj, "start")
	q.end, okE = bodyInt(obj, "end")
	q.limit, okL = bodyInt(obj, "limit")
	prec, okP = bodyInt(obj, "precision")
	switch {
	case !okS:
		errSchema(w, schema, "start: Not a valid integer (POSIX milliseconds).")
		return nil, false
	case !okE:
		errSchema(w, schema, "end: Not a valid integer (POSIX milliseconds).")
		return nil, false
	case !okL:
		errSchema(w, schema, "limit: Not a valid integer.")
		return nil, false
	case !okP:
		errSchema(w, schema, "precision: Not a valid integer.")
		return nil, false
	case q.start != nil && q.end != nil && *q.start > *q.end:
		errSchema(w, schema, "start: Must not be after end.")
		return nil, false
	case q.limit != nil && *q.limit < 0:
		errSchema(w, schema, "limit: Must be greater than or equal to 0.")
		return nil, false
	case prec != nil && (*prec < 0 || *prec > 15):
		errSchema(w, schema, "precision: Must be between 0 and 15.")
		return nil, false
	}
	if prec != nil {
		q.precision = int(*prec)
	}
	if v, present := obj["tz"]; present && v != nil {
		tz, isStr := v.(string)
		if !isStr {
			errSchema(w, schema, "tz: Not a valid string.")
			return nil, false
		}
		if _, err := time.LoadLocation(tz); err != nil || strings.EqualFold(tz, "local") {
			errSchema(w, schema, fmt.Sprintf("tz: %q is not a valid IANA time-zone name.", tz))
			return nil, false
		}
	}
	if raw {
		q.columns = []string{"value.value", "timestamp"}
		if v, present := obj["columns"]; present && v != nil {
			cols, isList := stringList(v)
			if !isList || len(cols) == 0 {
				errSchema(w, schema, "columns: Must be a non-empty list of strings.")
				return nil, false
			}
			for _, c := range cols {
				if !contains(rawColumns, c) {
					errSchema(w, schema, fmt.Sprintf("columns: %q must be one of: %s.", c, strings.Join(rawColumns, ", ")))
					return nil, false
				}
			}
			q.columns = cols
		}
	} else {
		agg, isStr := obj["aggregation"].(string)
		if !isStr || !contains(aggNames, agg) {
			errSchema(w, schema, fmt.Sprintf("aggregation: Must be one of: %s.", strings.Join(aggNames, ", ")))
			return nil, false
		}
		q.agg = agg
	}
	for _, id := range ids {
		vs, ok := s.snapVar(id)
		if !ok {
			errNotFound(w)
			return nil, false
		}
		q.vars = append(q.vars, vs)
	}
	floor := s.floorMs()
	if (q.start != nil && *q.start < floor) || (q.end != nil && *q.end < floor) {
		errRetention(w, false)
		return nil, false
	}
	return q, true
}

// window turns the time-range rules into a range and a per-variable cap:
// neither bound gives the last 100 values (an explicit limit replaces that
// cap, 0 meaning all retained points); with a bound there is no implicit cap.
func (q *dataQuery) window(floor int64) (lo, hi int64, limit int) {
	lo, hi, limit = floor, maxTs, -1
	if q.start != nil {
		lo = *q.start
	}
	if q.end != nil {
		hi = *q.end
	}
	if q.start == nil && q.end == nil {
		limit = 100
	}
	if q.limit != nil {
		if *q.limit == 0 {
			limit = -1
		} else {
			limit = int(min(*q.limit, math.MaxInt32))
		}
	}
	return lo, hi, limit
}

// POST /data/stats/aggregation/

func (s *Sim) postAggregation(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	q, ok := s.parseDataQuery(w, r, "AggregationSchema", false)
	if !ok {
		return
	}
	lo, hi, limit := q.window(s.floorMs())
	fn := q.agg
	if fn == "average" {
		fn = "mean"
	}
	res := make([]aggResult, len(q.vars))
	for i, vs := range q.vars {
		c := vs.ser.cursor(lo, hi)
		res[i] = aggregate(&c, limit, fn)
	}
	var b []byte
	if !q.join {
		b = append(b, `{"results":[`...)
		for i, a := range res {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"value":`...)
			if a.hasValue {
				b = appendFloat(b, roundTo(a.v, q.precision))
			} else {
				b = append(b, "null"...)
			}
			b = append(b, `,"timestamp":`...)
			if a.hasTs {
				b = appendInt(b, a.ts)
			} else {
				b = append(b, "null"...)
			}
			if fn == "raw" {
				b = append(b, `,"context":`...)
				if a.ctx != nil {
					b = append(b, a.ctx...)
				} else {
					b = append(b, "null"...)
				}
			}
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	} else {
		// One frame: rows outer-joined on the aggregate's timestamp, newest
		// first; an aggregate without a timestamp (empty input) joins no row.
		b = append(b, `{"columns":["timestamp"`...)
		for _, vs := range q.vars {
			b = append(b, ',')
			b = appendJSONString(b, vs.id+".value")
		}
		b = append(b, `],"results":[`...)
		used := make([]bool, len(res))
		first := true
		for {
			best, found := int64(0), false
			for i, a := range res {
				if !used[i] && a.hasTs && (!found || a.ts > best) {
					best, found = a.ts, true
				}
			}
			if !found {
				break
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '[')
			b = appendInt(b, best)
			for i, a := range res {
				b = append(b, ',')
				if !used[i] && a.hasTs && a.ts == best {
					used[i] = true
					b = appendFloat(b, roundTo(a.v, q.precision))
				} else {
					b = append(b, "null"...)
				}
			}
			b = append(b, ']')
		}
		b = append(b, "]}"...)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// POST /data/raw/series

type colKind uint8

const (
	colValue colKind = iota
	colTimestamp
	colVarID
	colVarLabel
	colVarName
	colVarProps
	colContext
	colDevID
	colDevName
	colDevLabel
)

var colKinds = map[string]colKind{
	"value.value": colValue, "timestamp": colTimestamp, "variable.id": colVarID, "variable.label": colVarLabel,
	"variable.name": colVarName, "variable.properties": colVarProps, "value.context": colContext,
	"device.id": colDevID, "device.name": colDevName, "device.label": colDevLabel,
}

// appendCell appends one cell of the cursor's current point. The point
// cells of an undecodable variable (Faults.UndecodableVariables) carry what
// no decoder accepts: "n/a" for the value and the context, 1e30 for the
// timestamp (only per-variable frames have a timestamp cell of their own).
func appendCell(b []byte, k colKind, c *cursor, vs *varSnap, precision int) []byte {
	if vs.undecodable {
		switch k {
		case colValue, colContext:
			return append(b, `"n/a"`...)
		case colTimestamp:
			return append(b, "1e30"...)
		}
	}
	switch k {
	case colValue:
		v := c.value()
		if precision >= 0 {
			v = round(v, precision)
		}
		return appendFloat(b, v)
	case colTimestamp:
		return appendInt(b, c.ts)
	case colVarID:
		return append(b, vs.idJSON...)
	case colVarLabel:
		return append(b, vs.labelJSON...)
	case colVarName:
		return append(b, vs.nameJSON...)
	case colVarProps:
		return append(b, vs.props...)
	case colContext:
		return c.appendContext(b)
	case colDevID:
		return append(b, vs.devIDJSON...)
	case colDevName:
		return append(b, vs.devNameJSON...)
	default:
		return append(b, vs.devLabelJSON...)
	}
}

func (s *Sim) postRawSeries(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	q, ok := s.parseDataQuery(w, r, "RawSeriesSchema", true)
	if !ok {
		return
	}
	f := s.CurrentFaults()
	for _, vs := range q.vars {
		if contains(f.RejectVariables, vs.id) {
			msg := "Variable " + vs.id + " cannot be read: invalid data."
			writeJSON(w, http.StatusBadRequest, codeDetailBody{400001, msg, map[string][]string{"variables": {msg}}})
			return
		}
		vs.undecodable = contains(f.UndecodableVariables, vs.id)
	}
	lo, hi, limit := q.window(s.floorMs())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	st := newStream(w)
	if q.join {
		writeJoined(st, q, lo, hi, limit)
	} else {
		writeFrames(st, q, lo, hi, limit)
	}
	st.flush()
}

// writeFrames writes one frame per variable, each with its own column list;
// every column but timestamp is prefixed with "<variable_id>.".
func writeFrames(st *stream, q *dataQuery, lo, hi int64, limit int) {
	kinds := make([]colKind, len(q.columns))
	for i, c := range q.columns {
		kinds[i] = colKinds[c]
	}
	st.buf = append(st.buf, `{"columns":[`...)
	for i, vs := range q.vars {
		if i > 0 {
			st.buf = append(st.buf, ',')
		}
		st.buf = append(st.buf, '[')
		for j, c := range q.columns {
			if j > 0 {
				st.buf = append(st.buf, ',')
			}
			if kinds[j] == colTimestamp {
				st.buf = append(st.buf, `"timestamp"`...)
			} else {
				st.buf = appendJSONString(st.buf, vs.id+"."+c)
			}
		}
		st.buf = append(st.buf, ']')
	}
	st.buf = append(st.buf, `],"results":[`...)
	for i, vs := range q.vars {
		if i > 0 {
			st.buf = append(st.buf, ',')
		}
		st.buf = append(st.buf, '[')
		c := vs.ser.cursor(lo, hi)
		for k := 0; (limit < 0 || k < limit) && c.next(); k++ {
			if k > 0 {
				st.buf = append(st.buf, ',')
			}
			st.buf = append(st.buf, '[')
			for j, kind := range kinds {
				if j > 0 {
					st.buf = append(st.buf, ',')
				}
				st.buf = appendCell(st.buf, kind, &c, vs, q.precision)
			}
			st.buf = append(st.buf, ']')
			if len(st.buf) >= 32<<10 {
				st.flush()
				if st.err != nil {
					return
				}
			}
		}
		st.buf = append(st.buf, ']')
	}
	st.buf = append(st.buf, "]}"...)
}

// writeJoined writes one frame: timestamp first and unprefixed, then each
// variable's block of "<variable_id>.<column>" in request order; rows are
// outer-joined on timestamp (newest first) with null cells for a variable
// without a point there.
func writeJoined(st *stream, q *dataQuery, lo, hi int64, limit int) {
	var kinds []colKind
	var names []string
	for _, c := range q.columns {
		if k := colKinds[c]; k != colTimestamp {
			kinds = append(kinds, k)
			names = append(names, c)
		}
	}
	st.buf = append(st.buf, `{"columns":["timestamp"`...)
	for _, vs := range q.vars {
		for _, n := range names {
			st.buf = append(st.buf, ',')
			st.buf = appendJSONString(st.buf, vs.id+"."+n)
		}
	}
	st.buf = append(st.buf, `],"results":[`...)
	nv := len(q.vars)
	curs := make([]cursor, nv)
	left := make([]int, nv) // points each variable may still give (-1: no cap)
	heads := make([]int64, nv)
	live := make([]bool, nv)
	for i, vs := range q.vars {
		curs[i] = vs.ser.cursor(lo, hi)
		left[i] = limit
		if left[i] != 0 {
			heads[i], live[i] = curs[i].peek()
		}
	}
	var nulls []byte
	for range kinds {
		nulls = append(nulls, ",null"...)
	}
	first := true
	for {
		found := false
		var ts int64
		for i := 0; i < nv; i++ {
			if live[i] && (!found || heads[i] > ts) {
				ts, found = heads[i], true
			}
		}
		if !found {
			break
		}
		if !first {
			st.buf = append(st.buf, ',')
		}
		first = false
		st.buf = append(st.buf, '[')
		st.buf = appendInt(st.buf, ts)
		for i := 0; i < nv; i++ {
			if !live[i] || heads[i] != ts {
				st.buf = append(st.buf, nulls...)
				continue
			}
			c := &curs[i]
			c.next()
			for _, kind := range kinds {
				st.buf = append(st.buf, ',')
				st.buf = appendCell(st.buf, kind, c, q.vars[i], q.precision)
			}
			if left[i] > 0 {
				left[i]--
			}
			if left[i] == 0 {
				live[i] = false
			} else {
				heads[i], live[i] = c.peek()
			}
		}
		st.buf = append(st.buf, ']')
		if len(st.buf) >= 32<<10 {
			st.flush()
			if st.err != nil {
				return
			}
		}
	}
	st.buf = append(st.buf, "]}"...)
}
