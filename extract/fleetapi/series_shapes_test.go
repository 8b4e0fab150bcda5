package fleetapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// The shapes fleetsim serves behind the memory benchmark's flags: contexts
// padded to several times their size, and `results` before `columns`. The
// client reads each to the same points, contexts byte for byte as the
// oracle has them.
func TestSeriesReadsPaddedContextsAndResultsBeforeColumns(t *testing.T) {
	for _, c := range []struct {
		name string
		opts fleetsim.Options
	}{
		{"--context-bytes 300", fleetsim.Options{ContextBytes: 300}},
		{"--results-first", fleetsim.Options{ResultsFirst: true}},
		{"both", fleetsim.Options{ContextBytes: 300, ResultsFirst: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newConf(t, c.opts)
			var ids []string
			for _, v := range e.variables("") {
				ids = append(ids, v.ID)
			}
			lo, hi := e.window()
			for _, joined := range []bool{false, true} {
				rec := seriesOf(t, e.ordinary(), joined, SeriesRequest{VariableIDs: ids, Start: lo, End: hi})
				padded := 0
				for i, id := range ids {
					samePoints(t, "frame of "+id, rec.frames[i], e.pointsIn(id, lo, hi))
					for _, p := range rec.frames[i] {
						if len(p.ctx) == c.opts.ContextBytes {
							padded++
						}
					}
				}
				if c.opts.ContextBytes > 0 && padded == 0 {
					t.Errorf("joined %v: no context of %d bytes read", joined, c.opts.ContextBytes)
				}
			}
		})
	}
}

// resultsFirst is a raw-series body of one frame of n rows of the given
// context, `results` before `columns`.
func resultsFirst(n int, ctx string) string {
	row := `[1700000000500,1.5,` + ctx + `]`
	return `{"results":[[` + strings.TrimSuffix(strings.Repeat(row+",", n), ",") + `]],"columns":[["timestamp","v1.value.value","v1.value.context"]]}`
}

func TestDecodeSeriesHoldsAtMostMaxHeldResultsOfResultsBeforeColumns(t *testing.T) {
	req := SeriesRequest{VariableIDs: []string{"v1"}, Start: 1_700_000_000_000, End: 1_700_000_001_000, Limit: 100_000}
	ctx := `{"pad":"` + strings.Repeat("x", 990) + `"}` // a row of ~1 KiB
	row := len(`[1700000000500,1.5,` + ctx + `],`)

	// Just within the bound: held, then decoded once the columns arrive.
	fits := MaxHeldResults/row - 1
	rec := newRecorder()
	if err := DecodeSeries(strings.NewReader(resultsFirst(fits, ctx)), req, rec); err != nil {
		t.Fatalf("results of %d bytes before columns: %v", fits*row, err)
	}
	if len(rec.frames[0]) != fits || rec.rows[0] != fits || rec.frames[0][0].ctx != ctx {
		t.Fatalf("decoded %d points (%d rows), want %d", len(rec.frames[0]), rec.rows[0], fits)
	}

	// Past it: a *TooLargeError, before anything reached the sink; without
	// the bound the decoder held the whole of `results` (it allowed 4 KiB
	// a requested row, up to 1 GiB), so memory grew with the rows' size.
	rec = newRecorder()
	err := DecodeSeries(strings.NewReader(resultsFirst(2*fits, ctx)), req, rec)
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("results of %d bytes before columns: got %v (%T), want a *TooLargeError", 2*fits*row, err, err)
	}
	if tl.Held > MaxHeldResults || tl.Variables != 1 || tl.Start != req.Start || tl.End != req.End {
		t.Errorf("TooLargeError %+v: held past the bound or names another request", tl)
	}
	if rec.calls != 0 || len(rec.order) != 0 {
		t.Errorf("the sink saw %d points and %v before the error; a request asked for again in halves would load them twice", rec.calls, rec.order)
	}
	if Retryable(err) || !tl.TooLarge() {
		t.Errorf("Retryable %v, TooLarge %v: the same request gets the same response, a smaller one may not", Retryable(err), tl.TooLarge())
	}
	// Columns first, the same rows stream without being held.
	body := `{"columns":[["timestamp","v1.value.value","v1.value.context"]],"results":[[` + strings.TrimSuffix(strings.Repeat(`[1700000000500,1.5,`+ctx+`],`, 2*fits), ",") + `]]}`
	if err := DecodeSeries(strings.NewReader(body), req, newRecorder()); err != nil {
		t.Errorf("the same rows, columns first: %v", err)
	}
}

// oneCountSink counts the points it is handed.
type oneCountSink struct{ n int }

func (s *oneCountSink) Point(int, Point) error  { s.n++; return nil }
func (s *oneCountSink) EndFrame(int, int) error { return nil }

// A point larger than MaxHeldResults, asked for alone (one variable, one
// millisecond: nothing smaller can be asked for), loads whichever member
// the response serves first; the same response for a window of two
// milliseconds, which can be halved, is refused as too large when
// `results` comes first.
func TestOnePointPastTheHeldBoundLoadsInEitherOrderWhenAskedForAlone(t *testing.T) {
	ctx := `{"pad":"` + strings.Repeat("x", MaxHeldResults+(1<<20)) + `"}`
	results := `"results":[[[1.5,1000,` + ctx + `]]]`
	columns := `"columns":[["v1.value.value","timestamp","v1.value.context"]]`
	alone := SeriesRequest{VariableIDs: []string{"v1"}, Start: 1000, End: 1000, Limit: 10000}
	for name, body := range map[string]string{"columns first": "{" + columns + "," + results + "}", "results first": "{" + results + "," + columns + "}"} {
		s := &oneCountSink{}
		if err := DecodeSeries(strings.NewReader(body), alone, s); err != nil || s.n != 1 {
			t.Errorf("%s: %d points, %v; want the one point", name, s.n, err)
		}
	}
	wider := alone
	wider.End = 1001
	s := &oneCountSink{}
	err := DecodeSeries(strings.NewReader("{"+results+","+columns+"}"), wider, s)
	var tl *TooLargeError
	if !errors.As(err, &tl) || s.n != 0 {
		t.Errorf("a window of two milliseconds, results first: %d points, %v; want none and a *TooLargeError", s.n, err)
	}
}
