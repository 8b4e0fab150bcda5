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
	"strings"
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
	return Point{TsMs: ts, Value: v, Context: contextObject(p.Context)}, true
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
	if err := s.expect('['); err != nil {
		return err
	}
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c == ']' {
		s.pos++
		return nil
	}
	for {
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
		c, err = s.peek()
		if err != nil {
			return err
		}
		s.pos++
		switch c {
		case ',':
		case ']':
			return nil
		default:
			return syntaxf("expected ',' or ']' between data points, found %q", c)
		}
	}
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
				v, _, verr := s.value()
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
// kept verbatim inside it.
func contextObject(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return json.RawMessage("{}")
	}
	end, _, err := scanValue(raw, 0, 0)
	if err != nil || end != len(raw) {
		return json.RawMessage("{}")
	}
	return appendCompact(nil, raw)
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

// Statistic computes one aggregate of one variable over [start, end] (GET
// /api/v1.6/variables/{id}/statistics/{function}/{start}/{end}). function is
// one of mean, min, max, sum, count, first, last, std; the service answers
// any other with 200 and {}, reported as ErrStatisticNotImplemented. ok is
// false when the service's value is null (no points in the range).
func (c *Client) Statistic(ctx context.Context, variableID, function string, start, end int64) (value float64, ok bool, err error) {
	path := "/variables/" + esc(variableID) + "/statistics/" + esc(function) + "/" +
		strconv.FormatInt(start, 10) + "/" + strconv.FormatInt(end, 10)
	var body map[string]json.RawMessage
	if err := c.getJSON(ctx, epStatistics, c.apiURL(dataPrefix, path, nil), &body); err != nil {
		return 0, false, fmt.Errorf("statistic %s of variable %s: %w", function, variableID, err)
	}
	if len(body) == 0 {
		return 0, false, fmt.Errorf("statistic %s of variable %s: %w", function, variableID, ErrStatisticNotImplemented)
	}
	raw, found := body[function]
	if !found {
		return 0, false, fmt.Errorf("statistic %s of variable %s: %w", function, variableID,
			&DecodeError{Frame: -1, Row: -1, Msg: fmt.Sprintf("the response has no key %q", function)})
	}
	v, ok, err := numberOrNull(raw)
	if err != nil {
		return 0, false, fmt.Errorf("statistic %s of variable %s: %w", function, variableID, err)
	}
	return v, ok, nil
}

// numberOrNull reads a JSON number, null, or an object holding a `value`.
func numberOrNull(raw json.RawMessage) (float64, bool, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return 0, false, nil
	case raw[0] == '{':
		var o struct {
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return 0, false, &DecodeError{Frame: -1, Row: -1, Msg: "unexpected statistic object", Err: err}
		}
		return numberOrNull(o.Value)
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		v, err := parseFloat(raw)
		if err != nil {
			return 0, false, &DecodeError{Frame: -1, Row: -1, Msg: "unexpected statistic value", Err: err}
		}
		return v, true, nil
	case raw[0] == '"':
		// A number sent as a string (a decimal rendered with its precision
		// kept): read it, but never guess at other text.
		if v, ok := looseNumber(raw); ok {
			return v, true, nil
		}
		return 0, false, &DecodeError{Frame: -1, Row: -1, Msg: fmt.Sprintf("unexpected statistic value %.40s", raw)}
	default:
		return 0, false, &DecodeError{Frame: -1, Row: -1, Msg: fmt.Sprintf("unexpected statistic value %.40s", raw)}
	}
}

// AggregationRequest is the body of POST /api/v1.6/data/stats/aggregation/.
type AggregationRequest struct {
	VariableIDs []string
	// Aggregation is one of mean, min, max, sum, count, first, last,
	// average (= mean) and raw (the newest point); the service answers any
	// other with 400.
	Aggregation string
	// Joined asks for one joined frame (join_dataframes true) instead of one
	// result per variable.
	Joined bool
	// Start and End are POSIX milliseconds; 0 means not given (with neither,
	// only the last 100 values of each variable count).
	Start, End int64
	// TZ is an IANA time-zone name; empty means the service's UTC.
	TZ string
	// Precision, when set, is the decimal places of the results.
	Precision *int
	// Limit, when set, truncates each input series before aggregating.
	Limit *int
}

// AggregateValue is the aggregate of one variable.
type AggregateValue struct {
	VariableID string
	// Value is the aggregate; HasValue is false when the service gave null.
	Value    float64
	HasValue bool
	// TsMs is the timestamp the service attached; HasTs is false when none.
	TsMs  int64
	HasTs bool
	// Context is the point's context for `raw` when the service gives it.
	Context json.RawMessage
}

// Aggregate runs the aggregation POST and returns one AggregateValue per
// requested variable, in request order, whichever join mode was asked: a
// joined frame is read by its returned columns (`timestamp` and
// `<variable_id>.<column>`). The two modes differ in shape: a joined frame
// has no row for an aggregate without a timestamp (an empty input), so such
// a variable comes back without a value even for count and sum.
func (c *Client) Aggregate(ctx context.Context, req AggregationRequest) ([]AggregateValue, error) {
	body := map[string]any{
		"variables":       req.VariableIDs,
		"aggregation":     req.Aggregation,
		"join_dataframes": req.Joined,
	}
	if req.Start != 0 {
		body["start"] = req.Start
	}
	if req.End != 0 {
		body["end"] = req.End
	}
	if req.TZ != "" {
		body["tz"] = req.TZ
	}
	if req.Precision != nil {
		body["precision"] = *req.Precision
	}
	if req.Limit != nil {
		body["limit"] = *req.Limit
	}
	var resp struct {
		Columns json.RawMessage   `json:"columns"`
		Results []json.RawMessage `json:"results"`
	}
	what := fmt.Sprintf("aggregation %s of %d variables", req.Aggregation, len(req.VariableIDs))
	if err := c.postJSON(ctx, epAggregation, c.apiURL(dataPrefix, "/data/stats/aggregation/", nil), body, &resp); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := make([]AggregateValue, len(req.VariableIDs))
	for i, id := range req.VariableIDs {
		out[i].VariableID = id
	}
	var cols []string
	if len(resp.Columns) > 0 && string(resp.Columns) != "null" {
		if err := json.Unmarshal(resp.Columns, &cols); err != nil {
			return nil, fmt.Errorf("%s: %w", what, &DecodeError{Frame: -1, Row: -1, Msg: "columns is not a list of strings", Err: err})
		}
	}
	var err error
	if cols != nil {
		err = joinedAggregates(cols, resp.Results, out)
	} else {
		err = perVariableAggregates(resp.Results, out, req.Aggregation)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// perVariableAggregates reads the per-variable results (join_dataframes
// false), one per requested variable in request order. The spec does not
// show their shape beyond that, so a result may be an object or a one-row
// frame holding one (an empty frame is no value), and its aggregate is under
// `value` or else under the function's name. Anything else is a
// *DecodeError, never a guess.
func perVariableAggregates(results []json.RawMessage, out []AggregateValue, aggregation string) error {
	if len(results) != len(out) {
		return &DecodeError{Frame: -1, Row: -1, Msg: fmt.Sprintf("%d results for %d variables", len(results), len(out))}
	}
	for i, raw := range results {
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '[' {
			var rows []json.RawMessage
			if err := json.Unmarshal(raw, &rows); err != nil || len(rows) > 1 {
				return &DecodeError{VariableID: out[i].VariableID, Frame: i, Row: -1,
					Msg: fmt.Sprintf("a result is a frame of %d rows, not one aggregate", len(rows)), Err: err}
			}
			if len(rows) == 0 {
				continue
			}
			raw = rows[0]
		}
		var r map[string]json.RawMessage
		if err := json.Unmarshal(raw, &r); err != nil {
			return &DecodeError{VariableID: out[i].VariableID, Frame: i, Row: -1, Msg: "a result is not an object", Err: err}
		}
		value, found := r["value"]
		if !found {
			value, found = r[aggregation]
		}
		if !found && aggregation == "average" {
			value, found = r["mean"]
		}
		if !found && len(r) > 0 {
			return &DecodeError{VariableID: out[i].VariableID, Frame: i, Row: -1,
				Msg: fmt.Sprintf("a result has neither `value` nor %q", aggregation)}
		}
		if err := fillAggregate(&out[i], value, r["timestamp"]); err != nil {
			return err
		}
		if c := bytes.TrimSpace(r["context"]); len(c) > 0 && c[0] == '{' {
			out[i].Context = object(c)
		}
	}
	return nil
}

func fillAggregate(a *AggregateValue, value, ts json.RawMessage) error {
	v, ok, err := numberOrNull(value)
	if err != nil {
		return err
	}
	a.Value, a.HasValue = v, ok
	if t := bytes.TrimSpace(ts); len(t) > 0 && string(t) != "null" {
		ms, err := parseMillis(t)
		if err != nil {
			return &DecodeError{VariableID: a.VariableID, Frame: -1, Row: -1, Msg: "bad timestamp", Err: err}
		}
		a.TsMs, a.HasTs = ms, true
	}
	return nil
}

// joinedAggregates reads a joined frame, where each variable's aggregate is
// named by its column, `<variable_id>.<column>`, so no order is assumed. A
// variable with several columns, or with a value in more than one row, makes
// the frame unreadable (*DecodeError) rather than a guess.
func joinedAggregates(cols []string, rows []json.RawMessage, out []AggregateValue) error {
	tsCol := -1
	valCol := make([]int, len(out))
	for i := range valCol {
		valCol[i] = -1
	}
	for j, name := range cols {
		if name == suffixTimestamp {
			tsCol = j
			continue
		}
		for i := range out {
			if !strings.HasPrefix(name, out[i].VariableID+".") {
				continue
			}
			if valCol[i] >= 0 {
				return &DecodeError{VariableID: out[i].VariableID, Frame: -1, Row: -1,
					Msg: fmt.Sprintf("the joined columns name the variable twice (%q and %q)", cols[valCol[i]], name)}
			}
			valCol[i] = j
		}
	}
	if tsCol < 0 {
		return &DecodeError{Frame: -1, Row: -1, Msg: "the joined columns have no timestamp"}
	}
	for r, raw := range rows {
		var cells []json.RawMessage
		if err := json.Unmarshal(raw, &cells); err != nil || len(cells) != len(cols) {
			return &DecodeError{Frame: -1, Row: r, Msg: fmt.Sprintf("a joined row is not a list of %d cells", len(cols)), Err: err}
		}
		for i := range out {
			if valCol[i] < 0 || string(bytes.TrimSpace(cells[valCol[i]])) == "null" {
				continue
			}
			if out[i].HasValue {
				return &DecodeError{VariableID: out[i].VariableID, Frame: -1, Row: r, Msg: "the variable has an aggregate in more than one joined row"}
			}
			if err := fillAggregate(&out[i], cells[valCol[i]], cells[tsCol]); err != nil {
				return err
			}
		}
	}
	return nil
}

// seriesBody is the raw-series request the client sends: always both bounds
// (so the implicit 100-point cap never applies), explicit columns and an
// explicit limit.
type seriesBody struct {
	Variables      []string `json:"variables"`
	Columns        []string `json:"columns"`
	JoinDataframes bool     `json:"join_dataframes"`
	Start          int64    `json:"start"`
	End            int64    `json:"end"`
	Limit          int      `json:"limit"`
}

// trackingSink notes whether anything reached the caller's sink.
type trackingSink struct {
	FrameSink
	delivered bool
}

func (t *trackingSink) Point(i int, p Point) error {
	t.delivered = true
	return t.FrameSink.Point(i, p)
}

func (t *trackingSink) EndFrame(i, rows int) error {
	t.delivered = true
	return t.FrameSink.EndFrame(i, rows)
}

// Series streams the raw series of req into sink (POST
// /api/v1.6/data/raw/series with join_dataframes false, columns timestamp,
// value.value and value.context, explicit start, end and limit), decoding it
// as DecodeSeries does without holding the body.
//
// Failures before the sink receives anything are retried here. On error,
// the sink may have received a partial response, which the caller must
// discard; the error tells by Retryable whether reading the request again is
// worthwhile (a body cut mid-stream is), and a range reaching past retention
// is a *RetentionError.
func (c *Client) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	return c.series(ctx, req, sink, false)
}

// SeriesJoined is Series with join_dataframes true: the service outer-joins
// the variables on timestamp into one frame, which the decoder splits back
// into one frame per variable (holding the response's points meanwhile), so
// the sink sees the same shape as with Series. A variable's row count is the
// number of joined rows where it has a sample.
func (c *Client) SeriesJoined(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	return c.series(ctx, req, sink, true)
}

func (c *Client) series(ctx context.Context, req SeriesRequest, sink FrameSink, joined bool) error {
	if len(req.VariableIDs) == 0 {
		return nil
	}
	body, err := json.Marshal(seriesBody{
		Variables: req.VariableIDs, Columns: seriesColumns, JoinDataframes: joined,
		Start: req.Start, End: req.End, Limit: req.Limit,
	})
	if err != nil {
		return fmt.Errorf("encode the raw series request: %w", err)
	}
	ts := &trackingSink{FrameSink: sink}
	err = c.do(ctx, &call{method: http.MethodPost, endpoint: epRawSeries, u: c.apiURL(dataPrefix, "/data/raw/series", nil),
		body: body, accept: "application/json", variables: req.VariableIDs,
		delivered: func() bool { return ts.delivered },
		handle: func(_ *http.Response, r io.Reader) error {
			return DecodeSeries(r, req, ts)
		}})
	if err != nil {
		return fmt.Errorf("raw series of %s over [%d, %d]: %w", describeVariables(req.VariableIDs), req.Start, req.End, err)
	}
	return nil
}

// describeVariables names a request's variables briefly.
func describeVariables(ids []string) string {
	switch len(ids) {
	case 1:
		return "variable " + ids[0]
	case 2:
		return fmt.Sprintf("2 variables [%s, %s]", ids[0], ids[1])
	default:
		return fmt.Sprintf("%d variables [%s, …, %s]", len(ids), ids[0], ids[len(ids)-1])
	}
}
