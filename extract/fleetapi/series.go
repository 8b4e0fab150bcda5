package fleetapi

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// seriesColumns are the columns the client asks for; the decoder finds them
// in the returned columns by these suffixes.
var seriesColumns = []string{"timestamp", "value.value", "value.context"}

const (
	suffixTimestamp = "timestamp"
	suffixValue     = "value.value"
	suffixContext   = "value.context"
)

// DecodeSeries reads a raw-series response body (POST /data/raw/series) from
// r and streams it into sink, frame by frame in request order: frame i is
// req.VariableIDs[i].
//
// Cell positions come from the returned `columns`, never from the request:
// the timestamp column is `timestamp` and the others are found by their
// suffix after the `<variable_id>.` prefix. Both modes are accepted, told
// apart by the shape of `columns`: per-variable frames (join_dataframes
// false; streamed without holding the body) and one joined frame (join
// true; outer-joined rows whose per-variable cells may all be null, which the
// decoder splits back into per-variable frames, holding at most the points of
// the response). When `results` comes before `columns` in the body its bytes
// are buffered, up to a bound derived from the request, and decoded once the
// columns are known.
//
// A row with a null timestamp or value is counted in its frame's row count
// but yields no point. The bare tokens NaN, Infinity and -Infinity, which
// Python's json module writes by default, are read as a value (math.NaN(),
// ±Inf) and kept verbatim inside a context. A null or empty context becomes
// "{}", and a context holding whitespace is compacted. A timestamp outside
// [req.Start, req.End], such as a seconds-precision one, is a *DecodeError
// naming the variable, as is a frame count different from the variable
// count.
//
// A *DecodeError about what one frame holds (a value or timestamp it cannot
// read, a malformed context, a timestamp outside the range) reports that
// frame's position in req.VariableIDs through VariableIndex; one about the
// response as a whole (its envelope, its frame or column count, a body that
// ended early) reports -1.
//
// Errors from the sink are returned wrapped but otherwise unchanged. On any
// error the sink may have received part of the response, which the caller
// must discard.
func DecodeSeries(r io.Reader, req SeriesRequest, sink FrameSink) error {
	d := &seriesDecoder{req: req, sink: sink}
	d.s.reset(r)
	return d.run()
}

// seriesDecoder holds the state of one DecodeSeries call.
type seriesDecoder struct {
	s    scanner
	req  SeriesRequest
	sink FrameSink

	haveCols bool
	joined   bool
	// frames are the column positions of each frame (per-variable mode).
	frames []frameCols
	// jcols are the columns of the joined frame.
	jcols []joinedCol

	// ctx is the current point's compact context.
	ctx []byte
	// frame and row locate the decoder for errors (-1 when outside).
	frame, row int
}

// frameCols locates the cells of one per-variable frame; -1 is absent.
type frameCols struct {
	ts, val, ctx, n int
}

type colKind uint8

const (
	colSkip colKind = iota
	colTS
	colValue
	colContext
	colOther
)

// joinedCol is one column of the joined frame and the variable it belongs
// to (-1 for the timestamp and unknown columns).
type joinedCol struct {
	kind colKind
	v    int
}

// sinkError marks an error returned by the sink so that it passes through
// undecorated.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }

func (d *seriesDecoder) run() error {
	d.frame, d.row = -1, -1
	if err := d.decode(); err != nil {
		return d.locate(err)
	}
	return nil
}

// locate turns a scanner error into a DecodeError naming where it happened.
func (d *seriesDecoder) locate(err error) error {
	var se *sinkError
	if errors.As(err, &se) {
		return fmt.Errorf("raw series sink, frame %d: %w", d.frame, se.err)
	}
	var de *DecodeError
	if errors.As(err, &de) {
		return de
	}
	e := &DecodeError{VariableID: d.variable(d.frame), Frame: d.frame, Row: d.row, Offset: d.s.offset()}
	var sy *syntaxError
	switch {
	case errors.As(err, &sy):
		e.Msg = sy.msg
		e.tied = e.VariableID != ""
	case errors.Is(err, io.ErrUnexpectedEOF):
		e.Msg, e.Err = "the body ended before the JSON document did", err
	default:
		e.Msg, e.Err = "reading the body", err
	}
	return e
}

func (d *seriesDecoder) variable(i int) string {
	if i >= 0 && i < len(d.req.VariableIDs) {
		return d.req.VariableIDs[i]
	}
	return ""
}

// fail reports a problem at the decoder's position; inside a frame it is
// tied to that frame's variable.
func (d *seriesDecoder) fail(format string, args ...any) error {
	vid := d.variable(d.frame)
	return &DecodeError{VariableID: vid, Frame: d.frame, Row: d.row, Offset: d.s.offset(),
		Msg: fmt.Sprintf(format, args...), tied: vid != ""}
}

// bufferLimit bounds the bytes of `results` held when they come before
// `columns`: a generous allowance per requested row, never less than 8 MiB,
// and a fixed ceiling when the request has no limit.
func bufferLimit(req SeriesRequest) int {
	const perRow, floor, ceiling = 4 << 10, 8 << 20, 1 << 30
	if req.Limit <= 0 {
		return ceiling
	}
	n := int64(req.Limit) * int64(max(len(req.VariableIDs), 1)) * perRow
	return int(min(max(n, floor), ceiling))
}

func (d *seriesDecoder) decode() error {
	if d.req.End < d.req.Start {
		return d.fail("invalid request range [%d, %d]", d.req.Start, d.req.End)
	}
	var pending []byte
	sawResults, pendingResults := false, false
	err := objectMembers(&d.s, func(key string) error {
		switch key {
		case "columns":
			if d.haveCols {
				return d.fail("`columns` appears twice")
			}
			return d.columns()
		case "results":
			if sawResults {
				return d.fail("`results` appears twice")
			}
			sawResults = true
			if d.haveCols {
				return d.results()
			}
			pendingResults = true
			return d.s.walk(&pending, bufferLimit(d.req))
		default:
			return d.s.walk(nil, 0)
		}
	})
	if err != nil {
		return err
	}
	if !sawResults {
		return d.fail("the response has no `results`")
	}
	if !d.haveCols {
		return d.fail("the response has no `columns`")
	}
	if pendingResults {
		d.s.resetBytes(pending)
		return d.results()
	}
	return nil
}

// columns reads `columns` and decides the mode from its shape.
func (d *seriesDecoder) columns() error {
	d.haveCols = true
	if err := d.s.expect('['); err != nil {
		return err
	}
	c, err := d.s.peek()
	if err != nil {
		return err
	}
	switch c {
	case ']':
		d.s.pos++
		if len(d.req.VariableIDs) != 0 {
			return d.fail("the response has no columns for %d variables", len(d.req.VariableIDs))
		}
		return nil
	case '"':
		names, err := d.stringArrayBody()
		if err != nil {
			return err
		}
		d.joined = true
		return d.joinedColumns(names)
	case '[':
		for k := 0; ; k++ {
			if err := d.s.expect('['); err != nil {
				return err
			}
			names, err := d.stringArrayBody()
			if err != nil {
				return err
			}
			if k >= len(d.req.VariableIDs) {
				return d.fail("the response has more column lists than the %d requested variables", len(d.req.VariableIDs))
			}
			fc, err := d.frameColumns(k, names)
			if err != nil {
				return err
			}
			d.frames = append(d.frames, fc)
			c, err := d.s.peek()
			if err != nil {
				return err
			}
			d.s.pos++
			if c == ']' {
				break
			}
			if c != ',' {
				return syntaxf("expected ',' or ']' in columns, found %q", c)
			}
		}
		if len(d.frames) != len(d.req.VariableIDs) {
			return d.fail("the response has %d column lists for %d requested variables", len(d.frames), len(d.req.VariableIDs))
		}
		return nil
	default:
		return syntaxf("unexpected %q in columns", c)
	}
}

// stringArrayBody reads the strings of an array whose '[' is consumed.
func (d *seriesDecoder) stringArrayBody() ([]string, error) {
	var out []string
	c, err := d.s.peek()
	if err != nil {
		return nil, err
	}
	if c == ']' {
		d.s.pos++
		return out, nil
	}
	for {
		s, err := d.s.stringValue()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		c, err := d.s.peek()
		if err != nil {
			return nil, err
		}
		d.s.pos++
		switch c {
		case ',':
		case ']':
			return out, nil
		default:
			return nil, syntaxf("expected ',' or ']' in a column list, found %q", c)
		}
	}
}

// otherVariableColumn tells whether name looks like a series column of some
// variable (a known suffix behind a prefix).
func otherVariableColumn(name string) bool {
	for _, suf := range seriesColumns {
		if strings.HasSuffix(name, "."+suf) && len(name) > len(suf)+1 {
			return true
		}
	}
	return false
}

// frameColumns locates the cells of frame k from its returned columns.
func (d *seriesDecoder) frameColumns(k int, names []string) (frameCols, error) {
	vid := d.req.VariableIDs[k]
	fc := frameCols{ts: -1, val: -1, ctx: -1, n: len(names)}
	for j, name := range names {
		suffix, prefixed := strings.CutPrefix(name, vid+".")
		switch {
		case name == suffixTimestamp || prefixed && suffix == suffixTimestamp:
			fc.ts = j
		case prefixed && suffix == suffixValue || name == suffixValue:
			fc.val = j
		case prefixed && suffix == suffixContext || name == suffixContext:
			fc.ctx = j
		case !prefixed && otherVariableColumn(name):
			return fc, &DecodeError{VariableID: vid, Frame: k, Row: -1, Offset: d.s.offset(),
				Msg: fmt.Sprintf("column %q of frame %d belongs to another variable than the requested %s", name, k, vid)}
		}
	}
	return fc, nil
}

// joinedColumns maps the joined frame's columns to variables.
func (d *seriesDecoder) joinedColumns(names []string) error {
	index := make(map[string]int, len(d.req.VariableIDs))
	for i, id := range d.req.VariableIDs {
		if _, dup := index[id]; dup {
			return d.fail("variable %s is requested twice, which a joined frame cannot tell apart", id)
		}
		index[id] = i
	}
	d.jcols = make([]joinedCol, len(names))
	hasTS := false
	hasValue := make([]bool, len(d.req.VariableIDs))
	for j, name := range names {
		jc := joinedCol{kind: colSkip, v: -1}
		if name == suffixTimestamp {
			jc.kind = colTS
			hasTS = true
		} else if i, ok := suffixVariable(name, suffixValue, index); ok {
			jc.kind, jc.v = colValue, i
			hasValue[i] = true
		} else if i, ok := suffixVariable(name, suffixContext, index); ok {
			jc.kind, jc.v = colContext, i
		} else if dot := longestPrefix(name, index); dot >= 0 {
			jc.kind, jc.v = colOther, index[name[:dot]]
		} else if otherVariableColumn(name) {
			return d.fail("joined column %q belongs to no requested variable", name)
		}
		d.jcols[j] = jc
	}
	if !hasTS {
		return d.fail("the joined columns have no `timestamp`")
	}
	for i, ok := range hasValue {
		if !ok {
			d.frame = i
			return d.fail("the joined columns have no value column for variable %s", d.req.VariableIDs[i])
		}
	}
	return nil
}

// suffixVariable tells whether name is "<id>.<suffix>" for a requested id.
func suffixVariable(name, suffix string, index map[string]int) (int, bool) {
	prefix, ok := strings.CutSuffix(name, "."+suffix)
	if !ok {
		return 0, false
	}
	i, ok := index[prefix]
	return i, ok
}

// longestPrefix returns the index of the dot that ends the longest requested
// variable id prefixing name, or -1.
func longestPrefix(name string, index map[string]int) int {
	best := -1
	for i := 0; i < len(name); i++ {
		if name[i] != '.' {
			continue
		}
		if _, ok := index[name[:i]]; ok {
			best = i
		}
	}
	return best
}

// results decodes `results` now that the columns are known.
func (d *seriesDecoder) results() error {
	if d.joined {
		return d.joinedResults()
	}
	s := &d.s
	if err := s.expect('['); err != nil {
		return err
	}
	k := 0
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c == ']' {
		s.pos++
	} else {
		for {
			if k >= len(d.req.VariableIDs) {
				d.frame, d.row = -1, -1
				return d.fail("the response has more frames than the %d requested variables", len(d.req.VariableIDs))
			}
			d.frame = k
			if err := d.frameRows(k); err != nil {
				return err
			}
			d.row = -1
			k++
			c, err := s.peek()
			if err != nil {
				return err
			}
			s.pos++
			if c == ']' {
				break
			}
			if c != ',' {
				return syntaxf("expected ',' or ']' between frames, found %q", c)
			}
		}
	}
	d.frame = -1
	if k != len(d.req.VariableIDs) {
		return d.fail("the response has %d frames for %d requested variables", k, len(d.req.VariableIDs))
	}
	return nil
}

// frameRows streams the rows of frame k into the sink.
func (d *seriesDecoder) frameRows(k int) error {
	s := &d.s
	if err := s.expect('['); err != nil {
		return err
	}
	fc := &d.frames[k]
	rows := 0
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c == ']' {
		s.pos++
	} else {
		if fc.ts < 0 || fc.val < 0 {
			return d.fail("frame %d has rows but its columns name no timestamp or no value.value", k)
		}
		for {
			d.row = rows
			if err := d.frameRow(k, fc); err != nil {
				return err
			}
			rows++
			c, err := s.peek()
			if err != nil {
				return err
			}
			s.pos++
			if c == ']' {
				break
			}
			if c != ',' {
				return syntaxf("expected ',' or ']' between rows, found %q", c)
			}
		}
	}
	if err := d.sink.EndFrame(k, rows); err != nil {
		return &sinkError{err}
	}
	return nil
}

// frameRow decodes one row of a per-variable frame.
func (d *seriesDecoder) frameRow(k int, fc *frameCols) error {
	s := &d.s
	if err := s.expect('['); err != nil {
		return err
	}
	var (
		ts          int64
		val         float64
		tsOK, valOK bool
		err         error
	)
	d.ctx = append(d.ctx[:0], '{', '}')
	j := 0
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c == ']' {
		s.pos++
	} else {
		for {
			switch j {
			case fc.ts:
				ts, tsOK, err = d.millisCell()
			case fc.val:
				val, valOK, err = d.floatCell()
			case fc.ctx:
				d.ctx, _, err = d.contextCell(d.ctx[:0])
			default:
				err = s.walk(nil, 0)
			}
			if err != nil {
				return err
			}
			j++
			c, err := s.peek()
			if err != nil {
				return err
			}
			s.pos++
			if c == ']' {
				break
			}
			if c != ',' {
				return syntaxf("expected ',' or ']' between cells, found %q", c)
			}
		}
	}
	if j != fc.n {
		return d.fail("row has %d cells but the frame's columns name %d", j, fc.n)
	}
	if !tsOK || !valOK {
		return nil
	}
	if err := d.checkTimestamp(ts); err != nil {
		return err
	}
	if err := d.sink.Point(k, Point{TsMs: ts, Value: val, Context: d.ctx}); err != nil {
		return &sinkError{err}
	}
	return nil
}

func (d *seriesDecoder) checkTimestamp(ts int64) error {
	if ts >= d.req.Start && ts <= d.req.End {
		return nil
	}
	hint := ""
	if ts > -1e11 && ts < 1e11 && d.req.Start >= 1e11 {
		hint = "; it reads like seconds, not milliseconds"
	}
	return d.fail("timestamp %d lies outside the requested range [%d, %d]%s", ts, d.req.Start, d.req.End, hint)
}

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

// joinedPoint is a point of the joined frame held until its variable's turn.
type joinedPoint struct {
	ts       int64
	val      float64
	ctxStart int
	ctxEnd   int
}

// joinedResults decodes the joined frame and hands it to the sink split by
// variable, in request order. The FrameSink contract is frame by frame, so
// the points are held (bounded by the response) until the frame is complete.
func (d *seriesDecoder) joinedResults() error {
	s := &d.s
	n := len(d.req.VariableIDs)
	var (
		points = make([][]joinedPoint, n)
		rows   = make([]int, n)
		arena  []byte
		// per-row state
		val    = make([]float64, n)
		valOK  = make([]bool, n)
		seen   = make([]bool, n)
		ctxBeg = make([]int, n)
		ctxEnd = make([]int, n)
	)
	if err := s.expect('['); err != nil {
		return err
	}
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c == ']' {
		s.pos++
	} else {
		for r := 0; ; r++ {
			d.row = r
			for i := range n {
				valOK[i], seen[i], ctxBeg[i], ctxEnd[i] = false, false, -1, -1
			}
			if err := s.expect('['); err != nil {
				return err
			}
			var ts int64
			tsOK := false
			j := 0
			c, err := s.peek()
			if err != nil {
				return err
			}
			if c == ']' {
				s.pos++
			} else {
				for {
					if j >= len(d.jcols) {
						return d.fail("joined row has more cells than the %d columns", len(d.jcols))
					}
					jc := d.jcols[j]
					switch jc.kind {
					case colTS:
						ts, tsOK, err = d.millisCell()
					case colValue:
						var ok bool
						val[jc.v], ok, err = d.floatCell()
						valOK[jc.v] = ok
						seen[jc.v] = seen[jc.v] || ok
					case colContext:
						start := len(arena)
						var present bool
						arena, present, err = d.contextCell(arena)
						if present {
							ctxBeg[jc.v], ctxEnd[jc.v] = start, len(arena)
							seen[jc.v] = true
						} else {
							arena = arena[:start]
						}
					case colOther:
						c, perr := s.peek()
						if perr != nil {
							return perr
						}
						if c == 'n' {
							err = s.literal("null")
						} else {
							seen[jc.v] = true
							err = s.walk(nil, 0)
						}
					default:
						err = s.walk(nil, 0)
					}
					if err != nil {
						if jc.v >= 0 {
							d.frame = jc.v
						}
						return err
					}
					j++
					c, err := s.peek()
					if err != nil {
						return err
					}
					s.pos++
					if c == ']' {
						break
					}
					if c != ',' {
						return syntaxf("expected ',' or ']' between cells, found %q", c)
					}
				}
			}
			if j != len(d.jcols) {
				return d.fail("joined row has %d cells but the columns name %d", j, len(d.jcols))
			}
			for i := range n {
				if !seen[i] {
					continue
				}
				rows[i]++
				if !tsOK || !valOK[i] {
					continue
				}
				if err := d.checkTimestamp(ts); err != nil {
					if de, ok := err.(*DecodeError); ok {
						de.VariableID, de.Frame, de.tied = d.req.VariableIDs[i], i, true
					}
					return err
				}
				points[i] = append(points[i], joinedPoint{ts: ts, val: val[i], ctxStart: ctxBeg[i], ctxEnd: ctxEnd[i]})
			}
			c, err = s.peek()
			if err != nil {
				return err
			}
			s.pos++
			if c == ']' {
				break
			}
			if c != ',' {
				return syntaxf("expected ',' or ']' between rows, found %q", c)
			}
		}
	}
	d.row = -1
	empty := []byte("{}")
	for i := range n {
		d.frame = i
		for _, p := range points[i] {
			ctx := empty
			if p.ctxStart >= 0 {
				ctx = arena[p.ctxStart:p.ctxEnd]
			}
			if err := d.sink.Point(i, Point{TsMs: p.ts, Value: p.val, Context: ctx}); err != nil {
				return &sinkError{err}
			}
		}
		if err := d.sink.EndFrame(i, rows[i]); err != nil {
			return &sinkError{err}
		}
	}
	d.frame = -1
	return nil
}
