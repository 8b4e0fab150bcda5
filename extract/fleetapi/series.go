package fleetapi

import (
	"errors"
	"fmt"
	"io"
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
// are held, and decoded once the columns are known; at most MaxHeldResults
// of them: a larger `results` is a *TooLargeError, returned before anything
// reaches the sink, and the same request for fewer variables or a shorter
// window gets a smaller one.
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
	var tl *TooLargeError
	if errors.As(err, &tl) {
		return tl
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

// MaxHeldResults bounds the bytes of a raw-series `results` that DecodeSeries
// holds when they come before `columns`. Without the columns no cell can be
// placed, so the whole of `results` waits; bounded by the request alone
// (its limit times its variables), what a response held grew with the size
// of its rows, and with four such requests in flight a dense backfill of
// fleetsim's data peaked at 452 MiB (issue 26). 8 MiB is some 250,000 rows
// of fleetsim's ~32 bytes: half the rows of fleetsync's default request (50
// variables × 10,000), which the pipeline then asks for in halves.
const MaxHeldResults = 8 << 20

// heldBound is how many bytes of a `results` served before `columns`
// DecodeSeries holds for req: MaxHeldResults, except for a request of one
// variable over one millisecond, which no caller can split further. What
// the service serves for one instant of one variable is held as a
// columns-first response would stream it, up to the allowance every
// request had before MaxHeldResults (4 KiB a requested row, at least
// 8 MiB, at most 1 GiB), so that whether such a point loads does not
// depend on the order of the response's members, which the spec leaves
// open.
func heldBound(req SeriesRequest) int {
	if len(req.VariableIDs) != 1 || req.Start != req.End {
		return MaxHeldResults
	}
	const perRow, ceiling = 4 << 10, 1 << 30
	if req.Limit <= 0 {
		return ceiling
	}
	return int(min(max(int64(req.Limit)*perRow, MaxHeldResults), ceiling))
}

// TooLargeError is a raw-series response whose `results` came before its
// `columns` and held more than MaxHeldResults bytes. Nothing of it reached
// the sink. It is not retryable as it stands: the same request gets the
// same response; a request for fewer variables, or for a shorter window,
// gets a smaller one.
type TooLargeError struct {
	// Variables is the number of variables the request named, and Start
	// and End its window (POSIX ms).
	Variables  int
	Start, End int64
	// Held is the bytes of `results` held when the decoder gave up, past
	// Bound, what it holds for such a request (heldBound).
	Held, Bound int
}

func (e *TooLargeError) Error() string {
	what := fmt.Sprintf("%d variables over [%d, %d]", e.Variables, e.Start, e.End)
	if e.Variables == 1 {
		what = fmt.Sprintf("one variable over [%d, %d]", e.Start, e.End)
	}
	return fmt.Sprintf("the response for %s served `results` before `columns`, more than the %d bytes the decoder holds of them; ask for fewer variables or a shorter window",
		what, e.Bound)
}

// TooLarge says that a request for less may succeed: the pipeline reads
// the window again in halves.
func (e *TooLargeError) TooLarge() bool { return true }

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
			bound := heldBound(d.req)
			err := d.s.walk(&pending, bound)
			var sy *syntaxError
			if errors.As(err, &sy) && sy.tooLarge {
				return &TooLargeError{Variables: len(d.req.VariableIDs), Start: d.req.Start, End: d.req.End, Held: len(pending), Bound: bound}
			}
			return err
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
