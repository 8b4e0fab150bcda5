package fleetapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// validatingSink checks what the decoder hands over: frames in order, each
// ended once, contexts valid compact JSON objects, timestamps in range.
type validatingSink struct {
	t     *testing.T
	req   SeriesRequest
	next  int // next frame expected to end
	cur   int
	rows  []int
	count int
}

func (s *validatingSink) Point(i int, p Point) error {
	if i != s.next {
		s.t.Fatalf("point for frame %d while frame %d is open", i, s.next)
	}
	if p.TsMs < s.req.Start || p.TsMs > s.req.End {
		s.t.Fatalf("timestamp %d outside [%d, %d] passed through", p.TsMs, s.req.Start, s.req.End)
	}
	// NaN, Infinity and -Infinity are kept verbatim in a context; the rest
	// must be JSON.
	ctx := finiteJSON(p.Context)
	if !json.Valid(ctx) || len(ctx) == 0 || ctx[0] != '{' {
		s.t.Fatalf("context %q is not a JSON object", p.Context)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, ctx); err != nil || !bytes.Equal(buf.Bytes(), ctx) {
		s.t.Fatalf("context %q is not compact", p.Context)
	}
	checkPosition(s.t, p)
	s.count++
	return nil
}

func (s *validatingSink) EndFrame(i, rows int) error {
	if i != s.next {
		s.t.Fatalf("EndFrame(%d), want frame %d", i, s.next)
	}
	if rows < 0 {
		s.t.Fatalf("negative row count %d", rows)
	}
	s.next++
	s.rows = append(s.rows, rows)
	return nil
}

func FuzzDecodeSeries(f *testing.F) {
	f.Add([]byte(`{"columns":[["timestamp","v1.value.value","v1.value.context"],["timestamp","v2.value.value","v2.value.context"]],"results":[[[1700000001000,1.5,{"lat":1.25,"lng":-2}],[1700000000000,2,{}]],[[1700000002000,-3.25e2,null]]]}`), false)
	f.Add([]byte(`{"results":[[[1700000001000,1.5,{ "a" : [1, {"b":"]"}] }]],[]],"columns":[["timestamp","v1.value.value","v1.value.context"],["timestamp","v2.value.value"]]}`), true)
	f.Add([]byte(`{"columns":["timestamp","v1.value.value","v1.value.context","v2.value.value"],"results":[[1700000002000,1,{"a":1},null],[1700000001000,null,null,5]]}`), false)
	f.Add([]byte(`{"columns":[[],[]],"results":[[],[]]}`), true)
	f.Add(seriesBodyFor([]string{"v1", "v2"}, 3, t0), true)
	f.Add([]byte(`{"columns":[["timestamp","v1.value.value"]],"results":[[[1700000001,1]]]}`), false)
	f.Add([]byte(`{"columns":[["timestamp","v1.value.value","v1.value.context"],["timestamp","v2.value.value","v2.value.context"]],"results":[[[1700000001000,NaN,{"a":NaN,"b":[Infinity,-Infinity]}]],[[1700000002000,-Infinity,null],[1700000003000,Infinity,{}]]]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, oneByte bool) {
		req := SeriesRequest{VariableIDs: []string{"v1", "v2"}, Start: t0, End: t0 + 10_000, Limit: 3}
		var r io.Reader = bytes.NewReader(body)
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		sink := &validatingSink{t: t, req: req}
		err := DecodeSeries(r, req, sink)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
			}
			return
		}
		if sink.next != len(req.VariableIDs) {
			t.Fatalf("success with %d frames ended, want %d", sink.next, len(req.VariableIDs))
		}
	})
}

func FuzzDecodeValuesCSV(f *testing.F) {
	head := "Timestamp,Human readable date (UTC),temperature,Context\r\n"
	f.Add(head + "1700000000000,2023-11-14 22:13:20.000000+00:00,21.5,b'{}'\r\n")
	f.Add(head + `1700000001000,x,3,"b'{""lat"": 48.1, ""lng"": 11.5}'"` + "\r\n")
	f.Add(head + `1700000000000,x,1,"b'{""q"": ""it\'s"", ""u"": ""\\u00e9"", ""raw"": ""\xc3\xa9""}'"` + "\r\n")
	f.Add(head + `1700000000000,x,,b''` + "\n")
	f.Add("")
	f.Add(head + `1700000000000,x,-inf,"b'{""a"": NaN, ""b"": [Infinity, -Infinity]}'"` + "\r\n")
	f.Fuzz(func(t *testing.T, body string) {
		err := DecodeValuesCSV(strings.NewReader(body), func(p Point) error {
			if ctx := finiteJSON(p.Context); !json.Valid(ctx) || ctx[0] != '{' {
				t.Fatalf("context %q is not a JSON object", p.Context)
			}
			checkPosition(t, p)
			return nil
		})
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
			}
		}
	})
}

func FuzzParseError(f *testing.F) {
	for _, b := range []string{
		`{"code": 404001, "message": "The request was not found."}`,
		`{"detail": "Invalid page."}`,
		`{"code":400001,"message":"Validation Error.","detail":{"name":["too long"]}}`,
		`{"description":"Bad Request","status":400,"message":"x"}`,
		``, `<html>`, `{"code":"x"}`, `{"code":1e400}`, "{\"message\":\"a\nb\"}",
	} {
		f.Add(400, []byte(b))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := ParseError(status, body)
		if e == nil || e.Status != status {
			t.Fatalf("ParseError lost the status: %+v", e)
		}
		e.Method, e.Endpoint = "GET", "/x"
		if line := e.Error(); strings.ContainsAny(line, "\n\r") {
			t.Fatalf("Error() spans lines: %q", line)
		}
	})
}

func FuzzDecodeValuesPage(f *testing.F) {
	f.Add([]byte(`{"count":2,"next":"?page=2","previous":null,"results":[{"timestamp":1700000000000,"value":NaN,"context":{"a":-Infinity}},{"timestamp":"1700000001000","value":"2.5","context":null}]}`))
	f.Add([]byte(`[{"timestamp":1700000000000,"value":Infinity,"context":{ "s" : "NaN" }}]`))
	f.Add([]byte(`{"count":true,"next":5,"results":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var page pageEnvelope[valueJSON]
		if err := decodeValuesPage(bytes.NewReader(body), &page); err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
			}
			return
		}
		for _, v := range page.Results {
			p, ok := v.point()
			if !ok {
				continue
			}
			if ctx := finiteJSON(p.Context); !json.Valid(ctx) || ctx[0] != '{' {
				t.Fatalf("context %q is not a JSON object", p.Context)
			}
			checkPosition(t, p)
		}
	})
}
