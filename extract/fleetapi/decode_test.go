package fleetapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseFloatMatchesStrconv(t *testing.T) {
	for _, s := range []string{"0", "-0", "1", "0.1", "0.3", "123.456", "999999999999999", "9999999999999999",
		"0.000001", "1.7976931348623157e308", "5e-324", "-12.5E+3", "3.141592653589793", "100000000000000000000000"} {
		got, err := parseFloat([]byte(s))
		var want float64
		fmt.Sscan(s, &want)
		if err != nil || math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("parseFloat(%s) = %v, %v; want %v", s, got, err, want)
		}
	}
}

func TestDecodeValuesCSV(t *testing.T) {
	const head = "Timestamp,Human readable date (UTC),temperature,Context\r\n"
	cases := []struct {
		name string
		body string
		want string
	}{
		{"python bytes literals are stripped and compacted", head +
			`1700000000000,2023-11-14 22:13:20.000000+00:00,21.5,b'{}'` + "\r\n" +
			`1700000001000,2023-11-14 22:13:21.000000+00:00,3,"b'{""lat"": 48.1, ""lng"": 11.5}'"` + "\r\n",
			`[1700000000000 21.5 {}] [1700000001000 3 {"lat":48.1,"lng":11.5}]`},
		{"python escapes are undone before the JSON is read", head +
			`1700000000000,x,1,"b'{""q"": ""it\'s"", ""bs"": ""a\\\\b"", ""u"": ""\\u00e9"", ""raw"": ""\xc3\xa9""}'"` + "\r\n",
			`[1700000000000 1 {"q":"it's","bs":"a\\b","u":"\u00e9","raw":"é"}]`},
		{"double-quoted literal when the bytes hold a single quote only", head +
			`1700000000000,x,1,"b""{}"""` + "\n",
			`[1700000000000 1 {}]`},
		{"the value column is named after the label and may be anything", "Timestamp,Human readable date (UTC),Température extérieure,Context\n" +
			`1700000000000,x,-1e3,b'{}'` + "\n",
			`[1700000000000 -1000 {}]`},
		{"empty values give no point", head + `1700000000000,x,,b'{}'` + "\n" + `1700000000001,x,2,` + "\n",
			`[1700000000001 2 {}]`},
		{"header only", head, ``},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := DecodeValuesCSV(strings.NewReader(tc.body), func(p Point) error {
				got = append(got, fmt.Sprintf("[%d %v %s]", p.TsMs, p.Value, p.Context))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("got  %s\nwant %s", s, tc.want)
			}
		})
	}
}

func TestDecodeValuesCSVRejects(t *testing.T) {
	const head = "Timestamp,Human readable date (UTC),temperature,Context\n"
	cases := []struct{ name, body, msg string }{
		{"empty body", "", "no header"},
		{"three columns", "Timestamp,Human readable date (UTC),temperature\n", "3 columns"},
		{"wrong header", "ts,date,v,ctx\n", "unexpected header"},
		{"context not a bytes literal", head + `1700000000000,x,1,"{""a"":1}"` + "\n", "Python bytes literal"},
		{"context not JSON", head + `1700000000000,x,1,b'{a}'` + "\n", "object key"},
		{"context not an object", head + `1700000000000,x,1,b'[1]'` + "\n", "not a JSON object"},
		{"bad timestamp", head + `17e,x,1,b'{}'` + "\n", "timestamp"},
		{"bad value", head + `1700000000000,x,abc,b'{}'` + "\n", "value"},
		{"short row", head + `1700000000000,x,1` + "\n", "3 fields"},
		{"bad quoting", head + `1700000000000,x,1,"b'{}` + "\n", "malformed CSV"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeValuesCSV(strings.NewReader(tc.body), func(Point) error { return nil })
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a *DecodeError", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
		})
	}
}

func TestDecodeValuesCSVPassesCallbackErrorsThrough(t *testing.T) {
	body := "Timestamp,Human readable date (UTC),t,Context\n1700000000000,x,1,b'{}'\n"
	err := DecodeValuesCSV(strings.NewReader(body), func(Point) error { return errSinkFull })
	if !errors.Is(err, errSinkFull) {
		t.Fatalf("got %v", err)
	}
}

func TestParseErrorReadsEveryBodyShape(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		code   int
		msg    string
		detail any
		desc   string
		line   string // substring of Error()
	}{
		{"code and message", 404, `{"code": 404001, "message": "The request was not found."}`,
			404001, "The request was not found.", nil, "", "GET /api/v2.0/devices/~x/: HTTP 404, code 404001: The request was not found."},
		{"detail only", 403, `{"detail": "You do not have permission to perform this action."}`,
			0, "", "You do not have permission to perform this action.", "", "HTTP 403 (detail: You do not have permission"},
		{"code, message and detail list", 400, `{"code":400001,"message":"Validation Error.","detail":["label keys are not allowed"]}`,
			400001, "Validation Error.", []any{"label keys are not allowed"}, "", `code 400001: Validation Error. (detail: ["label keys are not allowed"])`},
		{"code, message and detail object", 400, `{"code":400001,"message":"Validation Error.","detail":{"name":["too long"]}}`,
			400001, "Validation Error.", map[string]any{"name": []any{"too long"}}, "", `(detail: {"name":["too long"]})`},
		{"description, status, message", 400, `{"description":"Bad Request","status":400,"message":"RawSeriesSchema: limit must be >= 0 http://x/y"}`,
			0, "RawSeriesSchema: limit must be >= 0 http://x/y", nil, "Bad Request", "HTTP 400: RawSeriesSchema"},
		{"empty body", 403, ``, 0, "", nil, "", "HTTP 403: Forbidden"},
		{"html", 502, "<html>\n<b>Bad gateway</b></html>", 0, "<html> <b>Bad gateway</b></html>", nil, "", "HTTP 502: <html>"},
		{"code as a string", 401, `{"code":"401002","message":"Incorrect authentication credentials."}`, 401002, "Incorrect authentication credentials.", nil, "", "code 401002"},
		{"other object", 500, `{"error":"boom"}`, 0, `{"error":"boom"}`, nil, "", `HTTP 500: {"error":"boom"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := ParseError(tc.status, []byte(tc.body))
			e.Method, e.Endpoint = http.MethodGet, "/api/v2.0/devices/~x/"
			if e.Status != tc.status || e.Code != tc.code || e.Message != tc.msg || e.Description != tc.desc ||
				fmt.Sprint(e.Detail) != fmt.Sprint(tc.detail) {
				t.Errorf("got %+v", *e)
			}
			if line := e.Error(); !strings.Contains(line, tc.line) || strings.Contains(line, "\n") {
				t.Errorf("Error() = %q, want one line containing %q", line, tc.line)
			}
		})
	}
}

func TestErrorClassification(t *testing.T) {
	api := func(status, code int) error { return &APIError{Status: status, Code: code} }
	cases := []struct {
		err                                error
		retryable, retention, unauthorized bool
	}{
		{api(500, 0), true, false, false},
		{api(503, 0), true, false, false},
		{api(429, 0), true, false, false},
		{api(408, 0), true, false, false},
		{api(400, 400001), false, false, false},
		{api(404, 404001), false, false, false},
		{api(401, 401002), false, false, true},
		{&RetentionError{API: &APIError{Status: 403, Code: 403003}}, false, true, false},
		{fmt.Errorf("wrapped: %w", &TransportError{Cut: true, Err: errors.New("unexpected EOF")}), true, false, false},
		{&DecodeError{Msg: "bad"}, false, false, false},
		{&DecodeError{Msg: "read", Err: &TransportError{Err: errors.New("reset")}}, true, false, false},
		{errors.New("other"), false, false, false},
	}
	for _, tc := range cases {
		if got := Retryable(tc.err); got != tc.retryable {
			t.Errorf("Retryable(%v) = %v", tc.err, got)
		}
		if got := IsRetention(tc.err); got != tc.retention {
			t.Errorf("IsRetention(%v) = %v", tc.err, got)
		}
		if got := IsUnauthorized(tc.err); got != tc.unauthorized {
			t.Errorf("IsUnauthorized(%v) = %v", tc.err, got)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		v    string
		want time.Time
		ok   bool
	}{
		{"3", now.Add(3 * time.Second), true},
		{" 0 ", now, true},
		{"Sun, 22 Nov 2026 12:00:07 GMT", now.Add(7 * time.Second), true},
		{"", time.Time{}, false},
		{"soon", time.Time{}, false},
	}
	for _, tc := range cases {
		got, ok := parseRetryAfter(tc.v, now)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("parseRetryAfter(%q) = %v %v, want %v %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}
