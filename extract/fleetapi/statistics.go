package fleetapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

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
