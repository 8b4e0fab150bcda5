package fleetapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// ValuesQuery narrows a GET values read.
type ValuesQuery struct {
	// Start and End are POSIX milliseconds, inclusive; 0 means not given.
	// Without either, the JSON form returns only the last 100 points and the
	// CSV form the entire retained series.
	Start, End int64
	// PageSize is sent as page_size: 0 means the Client's PageSize for JSON
	// and none for CSV; a negative PageSize sends none (the service's
	// default of 100 for JSON).
	PageSize int
}

func (q ValuesQuery) values(format string) url.Values {
	v := url.Values{}
	if q.Start != 0 {
		v.Set("start", strconv.FormatInt(q.Start, 10))
	}
	if q.End != 0 {
		v.Set("end", strconv.FormatInt(q.End, 10))
	}
	if q.PageSize > 0 {
		v.Set("page_size", strconv.Itoa(q.PageSize))
	}
	if format != "" {
		v.Set("format", format)
	}
	return v
}

// valueJSON is a data point of the JSON values list (and of lastValue).
type valueJSON struct {
	Timestamp json.Number     `json:"timestamp"`
	Value     json.Number     `json:"value"`
	Context   json.RawMessage `json:"context"`
	CreatedAt json.Number     `json:"created_at"`
}

// point converts p; ok is false when its timestamp or value is null. A
// Value of NaN, Infinity or -Infinity (see decodeValuesPage) gives the
// non-finite float, and such tokens inside the context are kept verbatim.
func (p valueJSON) point() (Point, bool) {
	if p.Timestamp == "" || p.Value == "" {
		return Point{}, false
	}
	ts, err := parseMillis([]byte(p.Timestamp))
	if err != nil {
		return Point{}, false
	}
	var v float64
	switch tok := string(p.Value); tok {
	case tokNaN, tokInf, tokNegInf:
		v = nonFiniteValue(tok)
	default:
		if v, err = parseFloat([]byte(p.Value)); err != nil {
			return Point{}, false
		}
	}
	ctx, at := contextObject(p.Context)
	return at.point(ts, v, ctx), true
}

// decodeValuesPage reads one page of GET values into page, as decodeJSON
// reads any other list page, but with the package's scanner instead of
// encoding/json: a service written in Python writes the non-finite floats as
// the bare tokens NaN, Infinity and -Infinity, which are not JSON. Such a
// token is taken as a point's value (Value holds the token) and kept
// verbatim inside its context; anywhere else it is refused, as a timestamp
// or created_at, as with any other non-number. The envelope is read as
// pageEnvelope reads it: `next` and `previous` that are not strings count as
// null, `count` is kept raw, and a bare array is one complete page.
func decodeValuesPage(r io.Reader, page *pageEnvelope[valueJSON]) error {
	var s scanner
	s.reset(r)
	*page = pageEnvelope[valueJSON]{}
	err := valuesPage(&s, page)
	if err == nil {
		return nil
	}
	var te *TransportError
	if errors.As(err, &te) {
		return err
	}
	e := &DecodeError{Frame: -1, Row: -1, Offset: s.offset()}
	var sy *syntaxError
	switch {
	case errors.As(err, &sy):
		e.Msg = sy.msg
	case errors.Is(err, io.ErrUnexpectedEOF):
		e.Msg, e.Err = "the body ended before the JSON document did", io.ErrUnexpectedEOF
	default:
		e.Msg, e.Err = "reading the body", err
	}
	return e
}

func valuesPage(s *scanner, page *pageEnvelope[valueJSON]) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	switch c {
	case '[':
		return valuesResults(s, &page.Results)
	case 'n':
		return s.literal("null")
	case '{':
	default:
		return syntaxf("a values page must be an object or an array, found %q", c)
	}
	return objectMembers(s, func(key string) error {
		switch key {
		case "results":
			page.Results = nil
			if c, err := s.peek(); err != nil || c == 'n' {
				if err != nil {
					return err
				}
				return s.literal("null")
			}
			return valuesResults(s, &page.Results)
		case "count", "next", "previous":
			var raw []byte
			if err := s.walk(&raw, maxToken); err != nil {
				return err
			}
			switch key {
			case "count":
				page.Count = raw
			case "next":
				page.Next = link(raw)
			default:
				page.Previous = link(raw)
			}
			return nil
		default:
			return s.walk(nil, 0)
		}
	})
}

// valuesResults reads the array of data points at the current position.
func valuesResults(s *scanner, out *[]valueJSON) error {
	return arrayElements(s, "between data points", func() error {
		var p valueJSON
		c, err := s.peek()
		if err != nil {
			return err
		}
		switch c {
		case 'n':
			if err := s.literal("null"); err != nil {
				return err
			}
		case '{':
			if err := valuePoint(s, &p); err != nil {
				return err
			}
		default:
			return syntaxf("a data point must be an object, found %q", c)
		}
		*out = append(*out, p)
		return nil
	})
}

// valuePoint reads one data point object.
func valuePoint(s *scanner, p *valueJSON) error {
	return objectMembers(s, func(key string) error {
		var err error
		switch key {
		case "timestamp":
			p.Timestamp, err = numberText(s, "a timestamp", false)
		case "value":
			p.Value, err = numberText(s, "a value", true)
		case "created_at":
			p.CreatedAt, err = numberText(s, "created_at", false)
		case "context":
			p.Context = nil
			c, perr := s.peek()
			if perr != nil {
				return perr
			}
			if c == '{' {
				v, _, verr := s.value(nil)
				if verr != nil {
					return verr
				}
				p.Context = append(json.RawMessage(nil), v...)
				return nil
			}
			var raw []byte
			err = s.walk(&raw, maxToken)
			p.Context = raw
		default:
			err = s.walk(nil, 0)
		}
		return err
	})
}

// numberText reads a number as json.Number does: a JSON number, or a string
// holding one; null gives "". With nonFinite, NaN, Infinity and -Infinity
// are taken too and give the token itself.
func numberText(s *scanner, what string, nonFinite bool) (json.Number, error) {
	c, err := s.peek()
	if err != nil {
		return "", err
	}
	switch {
	case c == 'n':
		return "", s.literal("null")
	case c == '"':
		str, err := s.stringValue()
		if err != nil {
			return "", err
		}
		if !validNumber([]byte(str)) {
			return "", syntaxf("%s must be a number, found the string %q", what, clip(str, 40))
		}
		return json.Number(str), nil
	}
	tok, err := s.nonFiniteToken()
	if err != nil {
		return "", err
	}
	if tok != "" {
		if !nonFinite {
			return "", s.notNumber(what, c)
		}
		if err := s.literal(tok); err != nil {
			return "", err
		}
		return json.Number(tok), nil
	}
	if c != '-' && (c < '0' || c > '9') {
		return "", s.notNumber(what, c)
	}
	b, err := s.number()
	if err != nil {
		return "", err
	}
	if !validNumber(b) {
		return "", syntaxf("invalid number %q", b)
	}
	return json.Number(b), nil
}

// validNumber tells whether b is exactly one JSON number.
func validNumber(b []byte) bool {
	if len(b) == 0 || b[0] != '-' && (b[0] < '0' || b[0] > '9') {
		return false
	}
	end, err := scanNumber(append(b[:len(b):len(b)], ' '), 0)
	return err == nil && end == len(b)
}

// contextObject is object for a point's context: raw compacted when it is
// an object, "{}" otherwise, with NaN, Infinity and -Infinity accepted and
// kept verbatim inside it; and the position it holds, read while it is
// validated.
func contextObject(raw json.RawMessage) (json.RawMessage, position) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return json.RawMessage("{}"), position{}
	}
	var at position
	end, _, err := scanValue(raw, 0, 0, &at)
	if err != nil || end != len(raw) {
		return json.RawMessage("{}"), position{}
	}
	return appendCompact(nil, raw), at
}

// Values calls fn for the points of one variable (GET
// /api/v1.6/variables/{id}/values, JSON, all pages). Points with a null
// value are skipped; a value written as the bare token NaN, Infinity or
// -Infinity (Python's json module does) gives the non-finite float, and
// such tokens inside a context are kept verbatim. A page that vanishes
// while the list is paged is an error here, not a restart: points have no
// id to tell those already passed to fn.
func (c *Client) Values(ctx context.Context, variableID string, q ValuesQuery, fn func(Point) error) error {
	if q.PageSize == 0 {
		q.PageSize = c.cfg.PageSize
	}
	u := c.apiURL(dataPrefix, "/variables/"+esc(variableID)+"/values", q.values(""))
	err := listPages(ctx, c, epValues, u, func(v valueJSON) error {
		p, ok := v.point()
		if !ok {
			return nil
		}
		return fn(p)
	})
	if err != nil {
		return fmt.Errorf("values of variable %s: %w", variableID, err)
	}
	return nil
}

// ValuesCSV streams the points of one variable in the CSV form (GET
// /api/v1.6/variables/{id}/values?format=csv) through DecodeValuesCSV. The
// service ignores `page` in CSV, so this is one request; without a range or
// a page size it downloads the entire retained series. A retention
// violation, which CSV answers with an empty 403, is a *RetentionError. On
// error, fn may have seen part of the response; the caller must discard it.
func (c *Client) ValuesCSV(ctx context.Context, variableID string, q ValuesQuery, fn func(Point) error) error {
	delivered := false
	u := c.apiURL(dataPrefix, "/variables/"+esc(variableID)+"/values", q.values("csv"))
	err := c.do(ctx, &call{method: http.MethodGet, endpoint: epValuesCSV, u: u, accept: "text/csv", csv: true,
		delivered: func() bool { return delivered },
		handle: func(_ *http.Response, body io.Reader) error {
			return DecodeValuesCSV(body, func(p Point) error {
				delivered = true
				return fn(p)
			})
		}})
	if err != nil {
		return fmt.Errorf("csv values of variable %s: %w", variableID, err)
	}
	return nil
}
