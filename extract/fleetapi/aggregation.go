package fleetapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

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
