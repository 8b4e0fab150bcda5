package fleetapi

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// Python's json module writes the non-finite floats as the bare tokens NaN,
// Infinity and -Infinity unless told otherwise; a service written in Python
// sends them. These tests pin that they are read as values and kept
// verbatim in contexts, and refused elsewhere.

// sameFloat compares floats with NaN equal to NaN.
func sameFloat(a, b float64) bool {
	return a == b || math.IsNaN(a) && math.IsNaN(b)
}

// finiteJSON replaces the bare NaN, Infinity and -Infinity tokens outside
// strings with 0, so that encoding/json can check the rest of b.
func finiteJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	var q jsonQuote
	for i := 0; i < len(b); i++ {
		c := b[i]
		if q.step(c) {
			out = append(out, c)
			continue
		}
		replaced := false
		for _, tok := range []string{tokNegInf, tokInf, tokNaN} {
			if strings.HasPrefix(string(b[i:]), tok) {
				out = append(out, '0')
				i += len(tok) - 1
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, c)
		}
	}
	return out
}

func TestDecodeSeriesReadsNaNAndInfinityAsValuesAndKeepsThemInContexts(t *testing.T) {
	req := SeriesRequest{VariableIDs: []string{"v1", "v2"}, Start: t0, End: t0 + 10_000}
	want := map[int][]recPoint{
		0: {{t0, math.NaN(), `{"a":NaN,"s":"NaN"}`}, {t1, math.Inf(1), `{"b":[Infinity,-Infinity,1]}`}},
		1: {{t2, math.Inf(-1), `{}`}, {t2 + 1, 2.5, `{"lat":-Infinity}`}},
	}
	bodies := map[string]string{
		"per-variable frames": `{"columns":[["timestamp","v1.value.value","v1.value.context","v1.variable.name"],["timestamp","v2.value.value","v2.value.context"]],
			"results":[[[1700000000000,NaN,{ "a" : NaN, "s": "NaN" },NaN],[1700000001000,Infinity,{"b":[Infinity, -Infinity,1]},-Infinity]],
			[[1700000002000,-Infinity,null],[1700000002001,2.5,{"lat":-Infinity}]]]}`,
		"results before columns": `{"results":[[[1700000000000,NaN,{"a":NaN,"s":"NaN"},Infinity],[1700000001000,Infinity,{"b":[Infinity,-Infinity,1]},null]],
			[[1700000002000,-Infinity,{}],[1700000002001,2.5,{"lat":-Infinity}]]],
			"columns":[["timestamp","v1.value.value","v1.value.context","v1.variable.name"],["timestamp","v2.value.value","v2.value.context"]]}`,
		"joined frame": `{"columns":["timestamp","v1.value.value","v1.value.context","v1.variable.name","v2.value.value","v2.value.context"],
			"results":[[1700000000000,NaN,{"a":NaN,"s":"NaN"},NaN,null,null],[1700000001000,Infinity,{"b":[Infinity,-Infinity,1]},"x",null,null],
			[1700000002000,null,null,null,-Infinity,{}],[1700000002001,null,null,null,2.5,{"lat":-Infinity}]]}`,
	}
	for name, body := range bodies {
		for _, oneByte := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/one byte reads %v", name, oneByte), func(t *testing.T) {
				var r io.Reader = strings.NewReader(body)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				rec := newRecorder()
				if err := DecodeSeries(r, req, rec); err != nil {
					t.Fatal(err)
				}
				for i, w := range want {
					got := rec.frames[i]
					if len(got) != len(w) {
						t.Fatalf("frame %d: got %v, want %v", i, got, w)
					}
					for k := range w {
						if got[k].ts != w[k].ts || !sameFloat(got[k].v, w[k].v) || got[k].ctx != w[k].ctx {
							t.Errorf("frame %d point %d: got [%d %v %s], want [%d %v %s]",
								i, k, got[k].ts, got[k].v, got[k].ctx, w[k].ts, w[k].v, w[k].ctx)
						}
					}
				}
			})
		}
	}
}

func TestDecodeSeriesRefusesNonFiniteTimestampsAndMisspelledTokens(t *testing.T) {
	cols := `[["timestamp","v1.value.value","v1.value.context"],["timestamp","v2.value.value","v2.value.context"]]`
	cases := map[string]string{
		"NaN timestamp":       `[[],[[NaN,1,null]]]`,
		"-Infinity timestamp": `[[],[[-Infinity,1,null]]]`,
		"misspelled NaN":      `[[],[[1700000000000,Nan,null]]]`,
		"lowercase infinity":  `[[],[[1700000000000,infinity,null]]]`,
		"misspelled context":  `[[],[[1700000000000,1,{"a":Infinit}]]]`,
	}
	for name, results := range cases {
		t.Run(name, func(t *testing.T) {
			err := DecodeSeries(strings.NewReader(`{"columns":`+cols+`,"results":`+results+`}`), req2, newRecorder())
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %v (%T), want a *DecodeError", err, err)
			}
			if de.VariableIndex() != 1 {
				t.Errorf("VariableIndex() = %d, want 1 (%v)", de.VariableIndex(), err)
			}
		})
	}
}

func TestValuesReadNaNAndInfinityAsValuesAndKeepThemInContexts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1.6/variables/v1/values" {
			t.Errorf("unexpected request %s", r.URL)
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("page") == "" {
			_, _ = io.WriteString(w, `{"count": 4, "next": "?page=2", "previous": null, "results": [
				{"timestamp": 1700000000000, "value": NaN, "context": { "a" : NaN, "s": "Infinity" }, "created_at": 1700000000001},
				{"timestamp": "1700000001000", "value": Infinity, "context": {}, "extra": [NaN, -Infinity]}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"count": 4, "next": null, "results": [
			{"timestamp": 1700000002000, "value": -Infinity, "context": {"lat": -Infinity, "lng": 1}},
			{"timestamp": 1700000003000, "value": null, "context": null},
			{"timestamp": 1700000004000, "value": -2.5e1, "context": null}]}`)
	}))
	defer srv.Close()
	c, _, _ := newTestClient(t, srv.URL, nil)
	var got []recPoint
	err := c.Values(bg, "v1", ValuesQuery{}, func(p Point) error {
		got = append(got, recPoint{p.TsMs, p.Value, string(p.Context)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []recPoint{
		{t0, math.NaN(), `{"a":NaN,"s":"Infinity"}`},
		{t1, math.Inf(1), `{}`},
		{t2, math.Inf(-1), `{"lat":-Infinity,"lng":1}`},
		{t0 + 4000, -25, `{}`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].ts != want[i].ts || !sameFloat(got[i].v, want[i].v) || got[i].ctx != want[i].ctx {
			t.Errorf("point %d: got [%d %v %s], want [%d %v %s]", i, got[i].ts, got[i].v, got[i].ctx, want[i].ts, want[i].v, want[i].ctx)
		}
	}
}

func TestDecodeValuesPageRefusesWhatEncodingJSONRefused(t *testing.T) {
	for name, body := range map[string]string{
		"string value":       `{"results":[{"timestamp":1700000000000,"value":"n/a"}]}`,
		"NaN timestamp":      `{"results":[{"timestamp":NaN,"value":1}]}`,
		"boolean value":      `{"results":[{"timestamp":1700000000000,"value":true}]}`,
		"number point":       `{"results":[5]}`,
		"misspelled token":   `{"results":[{"timestamp":1700000000000,"value":Inf}]}`,
		"malformed context":  `{"results":[{"timestamp":1700000000000,"value":1,"context":{"a":}}]}`,
		"invalid number":     `{"results":[{"timestamp":1700000000000,"value":1.}]}`,
		"not a page":         `"x"`,
		"unterminated array": `{"results":[{"timestamp":1700000000000,"value":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			var page pageEnvelope[valueJSON]
			err := decodeValuesPage(strings.NewReader(body), &page)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %v (%T), want a *DecodeError", err, err)
			}
		})
	}
	var page pageEnvelope[valueJSON]
	if err := decodeValuesPage(strings.NewReader(`[{"timestamp":1700000000000,"value":"1.5"}]`), &page); err != nil ||
		len(page.Results) != 1 || page.Results[0].Value != "1.5" || page.Next != nil {
		t.Errorf("a bare array with a numeric string value: %+v, %v", page, err)
	}
	if err := decodeValuesPage(strings.NewReader(`{"count":true,"next":5,"results":null}`), &page); err != nil ||
		len(page.Results) != 0 || page.Next != nil || string(page.Count) != "true" {
		t.Errorf("count as a boolean, next not a string, results null: %+v, %v", page, err)
	}
}

func TestDecodeValuesCSVKeepsNonFiniteTokensInContexts(t *testing.T) {
	body := "Timestamp,Human readable date (UTC),temperature,Context\r\n" +
		`1700000000000,x,inf,"b'{""a"": NaN, ""b"": -Infinity}'"` + "\r\n"
	var got []recPoint
	err := DecodeValuesCSV(strings.NewReader(body), func(p Point) error {
		got = append(got, recPoint{p.TsMs, p.Value, string(p.Context)})
		return nil
	})
	if err != nil || len(got) != 1 || !math.IsInf(got[0].v, 1) || got[0].ctx != `{"a":NaN,"b":-Infinity}` {
		t.Fatalf("got %v, %v", got, err)
	}
}
