package fleetapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// recorder is a FrameSink keeping what it received, contexts copied.
type recorder struct {
	frames map[int][]recPoint
	rows   map[int]int
	order  []string // "p0", "e0", ... in call order
	failAt int      // return errSinkFull at this Point call (1-based); 0 never
	calls  int
}

type recPoint struct {
	ts  int64
	v   float64
	ctx string
}

var errSinkFull = errors.New("sink full")

func newRecorder() *recorder { return &recorder{frames: map[int][]recPoint{}, rows: map[int]int{}} }

func (r *recorder) Point(i int, p Point) error {
	r.calls++
	if r.failAt > 0 && r.calls == r.failAt {
		return errSinkFull
	}
	r.frames[i] = append(r.frames[i], recPoint{p.TsMs, p.Value, string(p.Context)})
	if n := len(r.order); n == 0 || r.order[n-1] != "p"+strconv.Itoa(i) {
		r.order = append(r.order, "p"+strconv.Itoa(i))
	}
	return nil
}

func (r *recorder) EndFrame(i, rows int) error {
	if _, dup := r.rows[i]; dup {
		return fmt.Errorf("EndFrame(%d) twice", i)
	}
	r.rows[i] = rows
	r.order = append(r.order, "e"+strconv.Itoa(i))
	return nil
}

func (r *recorder) String() string {
	var b strings.Builder
	for i := 0; i < len(r.rows) || r.frames[i] != nil; i++ {
		fmt.Fprintf(&b, "frame %d rows=%d:", i, r.rows[i])
		for _, p := range r.frames[i] {
			fmt.Fprintf(&b, " [%d %v %s]", p.ts, p.v, p.ctx)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

const (
	t0 = int64(1_700_000_000_000)
	t1 = t0 + 1000
	t2 = t0 + 2000
)

var req2 = SeriesRequest{VariableIDs: []string{"v1", "v2"}, Start: t0, End: t0 + 10_000, Limit: 100}

func TestDecodeSeriesReadsTheReturnedColumns(t *testing.T) {
	stdCols := `[["timestamp","v1.value.value","v1.value.context"],["timestamp","v2.value.value","v2.value.context"]]`
	cases := []struct {
		name string
		req  SeriesRequest
		body string
		want string
	}{
		{
			name: "per-variable frames, columns first",
			req:  req2,
			body: `{"columns":` + stdCols + `,"results":[[[1700000001000,1.5,{"lat":1.25,"lng":-2}],[1700000000000,2,{}]],[[1700000002000,-3.25e2,{}]]]}`,
			want: "frame 0 rows=2: [1700000001000 1.5 {\"lat\":1.25,\"lng\":-2}] [1700000000000 2 {}]\nframe 1 rows=1: [1700000002000 -325 {}]\n",
		},
		{
			name: "results before columns are buffered and decoded after",
			req:  req2,
			body: `{"results":[[[1700000001000,1.5,{"a":[1,{"b":"]"}]}]],[[1700000002000,7,null]]],"columns":` + stdCols + `}`,
			want: "frame 0 rows=1: [1700000001000 1.5 {\"a\":[1,{\"b\":\"]\"}]}]\nframe 1 rows=1: [1700000002000 7 {}]\n",
		},
		{
			name: "columns in another order than requested, with extra columns",
			req:  req2,
			body: `{"columns":[["v1.variable.label","v1.value.context","v1.value.value","timestamp"],["v2.value.value","timestamp","v2.device.id"]],` +
				`"results":[[["temp",{"x":1},20.5,1700000001000]],[[8,1700000002000,"dev"]]]}`,
			want: "frame 0 rows=1: [1700000001000 20.5 {\"x\":1}]\nframe 1 rows=1: [1700000002000 8 {}]\n",
		},
		{
			name: "null cells skip the point but count the row",
			req:  req2,
			body: `{"columns":` + stdCols + `,"results":[[[1700000001000,null,{}],[null,1,{}],[1700000000000,3,null]],[]]}`,
			want: "frame 0 rows=3: [1700000000000 3 {}]\nframe 1 rows=0:\n",
		},
		{
			name: "contexts are compacted only outside strings",
			req:  SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t2},
			body: `{"columns":[["timestamp","v1.value.value","v1.value.context"]],"results":[[` +
				`[1700000000000,1,{ "lat" : 1.5 ,` + "\n\t" + ` "lng": -2, "note": "a b\t\"c\"" }],` +
				`[1700000001000,2,{ }],` +
				`[1700000002000,3,{"u":"\u00e9\\"}]]]}`,
			want: "frame 0 rows=3: [1700000000000 1 {\"lat\":1.5,\"lng\":-2,\"note\":\"a b\\t\\\"c\\\"\"}] [1700000001000 2 {}] [1700000002000 3 {\"u\":\"\\u00e9\\\\\"}]\n",
		},
		{
			name: "numbers in any JSON form",
			req:  SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t0 + 10},
			body: `{"columns":[["timestamp","v1.value.value"]],"results":[[` +
				`[1700000000000,0],[1700000000001,-0.0],[1700000000002,1E+2],[1700000000003,1e-2],[1700000000004,0.1],` +
				`[1700000000005,123456789.123456789],[1.700000000006e12,-17],[1700000000007,12345678901234567890]]]}`,
			want: "frame 0 rows=8: [1700000000000 0 {}] [1700000000001 -0 {}] [1700000000002 100 {}] [1700000000003 0.01 {}] [1700000000004 0.1 {}] [1700000000005 1.2345678912345679e+08 {}] [1700000000006 -17 {}] [1700000000007 1.2345678901234567e+19 {}]\n",
		},
		{
			name: "unknown keys and whitespace everywhere",
			req:  req2,
			body: " {\n \"meta\" : {\"x\":[1,2,{\"]\":\"[\"}]}, \"columns\" : [ [ \"timestamp\" , \"v1.value.value\" ] , [ \"timestamp\", \"v2.value.value\" ] ] ,\n" +
				" \"results\" : [ [ [ 1700000000000 , 4 ] ] , [ ] ] , \"tail\": \"x\" , \"n\": null, \"t\": true }\n",
			want: "frame 0 rows=1: [1700000000000 4 {}]\nframe 1 rows=0:\n",
		},
		{
			name: "escaped column names",
			req:  SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t2},
			body: `{"columns":[["time\u0073tamp","v1.value\u002evalue"]],"results":[[[1700000000000,5]]]}`,
			want: "frame 0 rows=1: [1700000000000 5 {}]\n",
		},
		{
			name: "joined frame split back into variables",
			req:  req2,
			body: `{"columns":["timestamp","v1.value.value","v1.value.context","v2.value.value","v2.value.context"],"results":[` +
				`[1700000002000,1,{"a":1},null,null],` +
				`[1700000001000,2,{},5,{"b":2}],` +
				`[1700000000000,null,null,6,{}]]}`,
			want: "frame 0 rows=2: [1700000002000 1 {\"a\":1}] [1700000001000 2 {}]\nframe 1 rows=2: [1700000001000 5 {\"b\":2}] [1700000000000 6 {}]\n",
		},
		{
			name: "joined frame with results first",
			req:  req2,
			body: `{"results":[[1700000002000,1,null,null],[1700000001000,null,{"z":true},3]],` +
				`"columns":["timestamp","v1.value.value","v2.value.context","v2.value.value"]}`,
			want: "frame 0 rows=1: [1700000002000 1 {}]\nframe 1 rows=1: [1700000001000 3 {\"z\":true}]\n",
		},
		{
			name: "joined ids with dots pick the longest requested prefix",
			req:  SeriesRequest{VariableIDs: []string{"a", "a.value"}, Start: t0, End: t2},
			body: `{"columns":["timestamp","a.value.value","a.value.value.value"],"results":[[1700000000000,1,2]]}`,
			want: "frame 0 rows=1: [1700000000000 1 {}]\nframe 1 rows=1: [1700000000000 2 {}]\n",
		},
		{
			name: "empty frames",
			req:  req2,
			body: `{"columns":[[],[]],"results":[[],[]]}`,
			want: "frame 0 rows=0:\nframe 1 rows=0:\n",
		},
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
		"data+EOF": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
	}
	for _, tc := range cases {
		for rn, mk := range readers {
			t.Run(tc.name+"/"+rn, func(t *testing.T) {
				rec := newRecorder()
				if err := DecodeSeries(mk(tc.body), tc.req, rec); err != nil {
					t.Fatalf("DecodeSeries: %v", err)
				}
				if got := rec.String(); got != tc.want {
					t.Errorf("decoded\n%s\nwant\n%s", got, tc.want)
				}
			})
		}
	}
}

func TestDecodeSeriesDeliversFramesInRequestOrder(t *testing.T) {
	for _, body := range []string{
		`{"columns":[["timestamp","v1.value.value"],["timestamp","v2.value.value"]],"results":[[[1700000000000,1],[1700000001000,2]],[[1700000000000,3]]]}`,
		`{"columns":["timestamp","v1.value.value","v2.value.value"],"results":[[1700000001000,2,null],[1700000000000,1,3]]}`,
	} {
		rec := newRecorder()
		if err := DecodeSeries(strings.NewReader(body), req2, rec); err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(rec.order, " "), "p0 e0 p1 e1"; got != want {
			t.Errorf("call order %q, want %q for %s", got, want, body)
		}
	}
}

func TestDecodeSeriesRejects(t *testing.T) {
	cols := `[["timestamp","v1.value.value"],["timestamp","v2.value.value"]]`
	cases := []struct {
		name  string
		req   SeriesRequest
		body  string
		msg   string // substring of the error
		varID string // DecodeError.VariableID wanted, "" to skip
		cut   bool   // errors.Is io.ErrUnexpectedEOF
	}{
		{name: "seconds-precision timestamp", req: req2, body: `{"columns":` + cols + `,"results":[[],[[1700000001,1]]]}`,
			msg: "reads like seconds", varID: "v2"},
		{name: "timestamp after end", req: req2, body: `{"columns":` + cols + `,"results":[[[1800000000000,1]],[]]}`,
			msg: "outside the requested range", varID: "v1"},
		{name: "timestamp before start in a joined frame", req: req2,
			body: `{"columns":["timestamp","v1.value.value","v2.value.value"],"results":[[1600000000000,null,1]]}`,
			msg:  "outside the requested range", varID: "v2"},
		{name: "fractional timestamp", req: req2, body: `{"columns":` + cols + `,"results":[[[1700000000000.5,1]],[]]}`,
			msg: "whole number"},
		{name: "fewer frames than variables", req: req2, body: `{"columns":` + cols + `,"results":[[]]}`,
			msg: "1 frames for 2 requested variables"},
		{name: "more frames than variables", req: req2, body: `{"columns":` + cols + `,"results":[[],[],[]]}`,
			msg: "more frames"},
		{name: "fewer column lists than variables", req: req2, body: `{"columns":[["timestamp","v1.value.value"]],"results":[[],[]]}`,
			msg: "1 column lists for 2"},
		{name: "frame columns of another variable", req: req2,
			body: `{"columns":[["timestamp","v2.value.value"],["timestamp","v1.value.value"]],"results":[[],[]]}`,
			msg:  "belongs to another variable", varID: "v1"},
		{name: "joined column of an unrequested variable", req: req2,
			body: `{"columns":["timestamp","v1.value.value","v2.value.value","v3.value.value"],"results":[]}`,
			msg:  "no requested variable"},
		{name: "joined frame without a variable's value column", req: req2,
			body: `{"columns":["timestamp","v1.value.value"],"results":[]}`, msg: "no value column for variable v2", varID: "v2"},
		{name: "row longer than its columns", req: req2, body: `{"columns":` + cols + `,"results":[[[1700000000000,1,2]],[]]}`,
			msg: "3 cells"},
		{name: "rows without a value column", req: req2,
			body: `{"columns":[["timestamp"],["timestamp"]],"results":[[[1700000000000]],[]]}`, msg: "no value.value"},
		{name: "string value", req: req2, body: `{"columns":` + cols + `,"results":[[[1700000000000,"1"]],[]]}`,
			msg: "must be a number"},
		{name: "context not an object", req: SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t1},
			body: `{"columns":[["timestamp","v1.value.value","v1.value.context"]],"results":[[[1700000000000,1,[1]]]]}`,
			msg:  "must be an object"},
		{name: "invalid context JSON", req: SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t1},
			body: `{"columns":[["timestamp","v1.value.value","v1.value.context"]],"results":[[[1700000000000,1,{"a":tru}]]]}`,
			msg:  "invalid literal"},
		{name: "no comma between frames", req: req2, body: `{"columns":` + cols + `,"results":[[] []]}`, msg: "expected ',' or ']' between frames"},
		{name: "no comma between rows", req: req2, body: `{"columns":` + cols + `,"results":[[[1700000000000,1] [1700000000001,1]],[]]}`,
			msg: "expected ',' or ']' between rows"},
		{name: "no comma between cells", req: req2, body: `{"columns":` + cols + `,"results":[[[1700000000000 1]],[]]}`,
			msg: "expected ',' or ']' between cells"},
		{name: "no comma between joined rows", req: req2,
			body: `{"columns":["timestamp","v1.value.value","v2.value.value"],"results":[[1700000000000,1,2] [1700000000001,1,2]]}`,
			msg:  "expected ',' or ']' between rows"},
		{name: "no comma between joined cells", req: req2,
			body: `{"columns":["timestamp","v1.value.value","v2.value.value"],"results":[[1700000000000,1 2]]}`,
			msg:  "expected ',' or ']' between cells"},
		{name: "no comma between column lists", req: req2, body: `{"columns":[["timestamp","v1.value.value"] ["timestamp","v2.value.value"]],"results":[[],[]]}`,
			msg: "expected ',' or ']' in columns"},
		{name: "no comma in a column list", req: req2, body: `{"columns":[["timestamp" "v1.value.value"],["timestamp","v2.value.value"]],"results":[[],[]]}`,
			msg: "expected ',' or ']' in a column list"},
		{name: "no comma between members", req: req2, body: `{"columns":` + cols + ` "results":[[],[]]}`, msg: "expected ',' or '}' in an object"},
		{name: "no results", req: req2, body: `{"columns":` + cols + `}`, msg: "no `results`"},
		{name: "no columns", req: req2, body: `{"results":[[],[]]}`, msg: "no `columns`"},
		{name: "not an object", req: req2, body: `[1,2]`, msg: "expected '{'"},
		{name: "body cut mid-row", req: req2, body: `{"columns":` + cols + `,"results":[[[1700000000000,1],[17000`,
			msg: "ended", cut: true},
		{name: "body cut inside a string", req: req2, body: `{"columns":[["times`, msg: "ended", cut: true},
		{name: "empty body", req: req2, body: ``, cut: true, msg: "ended"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeSeries(strings.NewReader(tc.body), tc.req, newRecorder())
			if err == nil {
				t.Fatal("no error")
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
			if tc.varID != "" && de.VariableID != tc.varID {
				t.Errorf("error names variable %q, want %q (%v)", de.VariableID, tc.varID, err)
			}
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != tc.cut {
				t.Errorf("errors.Is(err, io.ErrUnexpectedEOF) = %v, want %v (%v)", got, tc.cut, err)
			}
			if Retryable(err) {
				t.Errorf("a decode error must be permanent: %v", err)
			}
		})
	}
}

func TestDecodeSeriesPassesSinkErrorsThrough(t *testing.T) {
	body := `{"columns":[["timestamp","v1.value.value"],["timestamp","v2.value.value"]],"results":[[[1700000000000,1],[1700000001000,2]],[]]}`
	rec := newRecorder()
	rec.failAt = 2
	err := DecodeSeries(strings.NewReader(body), req2, rec)
	if !errors.Is(err, errSinkFull) {
		t.Fatalf("got %v, want the sink's error", err)
	}
	var de *DecodeError
	if errors.As(err, &de) {
		t.Errorf("a sink error must not become a DecodeError: %v", err)
	}
}

func TestDecodeSeriesReportsReadErrors(t *testing.T) {
	boom := errors.New("connection reset by peer")
	body := `{"columns":[["timestamp","v1.value.value"],["timestamp","v2.value.value"]],"results":[[[1700000000000,1],`
	r := io.MultiReader(strings.NewReader(body), iotest.ErrReader(boom))
	err := DecodeSeries(r, req2, newRecorder())
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the reader's error wrapped", err)
	}
}

func TestDecodeSeriesHandlesTokensLargerThanTheWindow(t *testing.T) {
	big := strings.Repeat("é", 200_000) // 400 kB string inside a context
	body := `{"columns":[["timestamp","v1.value.value","v1.value.context"]],"results":[[[1700000000000,1,{"s":"` + big + `"}],[1700000000001,2,{}]]]}`
	rec := newRecorder()
	req := SeriesRequest{VariableIDs: []string{"v1"}, Start: t0, End: t1}
	if err := DecodeSeries(iotest.HalfReader(strings.NewReader(body)), req, rec); err != nil {
		t.Fatal(err)
	}
	if got := rec.frames[0]; len(got) != 2 || got[0].ctx != `{"s":"`+big+`"}` || got[1].ctx != "{}" {
		t.Errorf("large context not read back whole: %d points", len(got))
	}
}

// seriesBodyFor renders a per-variable raw-series response of n points per
// variable, positions with lat/lng contexts on odd variables.
func seriesBodyFor(vars []string, n int, start int64) []byte {
	var b bytes.Buffer
	b.WriteString(`{"columns":[`)
	for i, v := range vars {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `["timestamp","%s.value.value","%s.value.context"]`, v, v)
	}
	b.WriteString(`],"results":[`)
	for i := range vars {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		for k := 0; k < n; k++ {
			if k > 0 {
				b.WriteByte(',')
			}
			ts := start + int64(n-k)*1000
			if i%2 == 1 {
				fmt.Fprintf(&b, `[%d,%g,{"lat":%.6f,"lng":%.6f}]`, ts, 3+float64(k%50)/10, 48.1+float64(k%997)/1e4, 11.5-float64(k%991)/1e4)
			} else {
				fmt.Fprintf(&b, `[%d,%.2f,{}]`, ts, 20+float64(k%1000)/100)
			}
		}
		b.WriteByte(']')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

type countingSink struct{ points, rows int }

func (s *countingSink) Point(int, Point) error         { s.points++; return nil }
func (s *countingSink) EndFrame(_ int, rows int) error { s.rows += rows; return nil }

func BenchmarkDecodeSeries(b *testing.B) {
	vars := []string{"6a1f0c0e9b3d4c2a1f0e9d8c", "6a1f0c0e9b3d4c2a1f0e9d8d"}
	const n = 50_000
	body := seriesBodyFor(vars, n, t0)
	req := SeriesRequest{VariableIDs: vars, Start: t0, End: t0 + int64(n+1)*1000, Limit: n}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	var sink countingSink
	for b.Loop() {
		if err := DecodeSeries(bytes.NewReader(body), req, &sink); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	points := float64(sink.points)
	b.ReportMetric(points/b.Elapsed().Seconds(), "points/s")
	var ms testingAllocs
	ms.measure(func() { _ = DecodeSeries(bytes.NewReader(body), req, &countingSink{}) })
	b.ReportMetric(ms.bytes/float64(2*n), "B/point")
	b.ReportMetric(ms.allocs/float64(2*n), "allocs/point")
}
