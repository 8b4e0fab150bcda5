package fleetsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

// The control interface under /_sim/: JSON over HTTP, no authentication,
// never affected by faults and never counted. docs/fleetsim.md lists it.

// faultsJSON is Faults with durations as Go duration strings ("250ms").
type faultsJSON struct {
	Latency       string  `json:"latency"`
	ErrorRate     float64 `json:"error_rate"`
	RateLimitRate float64 `json:"rate_limit_rate"`
	RetryAfter    string  `json:"retry_after"`
	CutRate       float64 `json:"cut_rate"`
	SlowHeaders   string  `json:"slow_headers"`
	SlowRate      float64 `json:"slow_rate"`
	Seed          int64   `json:"seed"`
	// RetryAfterDate and Variables are Faults.RetryAfterDate and
	// Faults.Variables.
	RetryAfterDate bool     `json:"retry_after_date,omitempty"`
	Variables      []string `json:"variables,omitempty"`
	// UndecodableVariables and RejectVariables are the Faults fields of
	// the same names.
	UndecodableVariables []string `json:"undecodable_variables,omitempty"`
	RejectVariables      []string `json:"reject_variables,omitempty"`
}

func toFaultsJSON(f Faults) faultsJSON {
	return faultsJSON{
		Latency: f.Latency.String(), ErrorRate: f.ErrorRate, RateLimitRate: f.RateLimitRate, RetryAfter: f.RetryAfter,
		CutRate: f.CutRate, SlowHeaders: f.SlowHeaders.String(), SlowRate: f.SlowRate, Seed: f.Seed,
		RetryAfterDate: f.RetryAfterDate, Variables: f.Variables,
		UndecodableVariables: f.UndecodableVariables, RejectVariables: f.RejectVariables,
	}
}

func (fj faultsJSON) faults() (Faults, error) {
	f := Faults{ErrorRate: fj.ErrorRate, RateLimitRate: fj.RateLimitRate, RetryAfter: fj.RetryAfter, CutRate: fj.CutRate, SlowRate: fj.SlowRate, Seed: fj.Seed,
		RetryAfterDate: fj.RetryAfterDate, Variables: fj.Variables,
		UndecodableVariables: fj.UndecodableVariables, RejectVariables: fj.RejectVariables}
	var err error
	if fj.Latency != "" {
		if f.Latency, err = time.ParseDuration(fj.Latency); err != nil {
			return f, fmt.Errorf("latency: %w", err)
		}
	}
	if fj.SlowHeaders != "" {
		if f.SlowHeaders, err = time.ParseDuration(fj.SlowHeaders); err != nil {
			return f, fmt.Errorf("slow_headers: %w", err)
		}
	}
	return f, checkFaults(f)
}

type controlError struct {
	status int
	msg    string
}

func (e *controlError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &controlError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

func decodeStrict(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBodySize))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("body: %v", err)
	}
	return nil
}

func (s *Sim) serveControl(w http.ResponseWriter, r *http.Request) {
	path := strings.Trim(strings.TrimPrefix(r.URL.Path, "/_sim"), "/")
	seg := strings.Split(path, "/")
	result, status, err := s.control(r, seg)
	if err != nil {
		var ce *controlError
		status = http.StatusInternalServerError
		switch {
		case errors.As(err, &ce):
			status = ce.status
		case errors.Is(err, ErrNotFound):
			status = http.StatusNotFound
		case errors.Is(err, ErrConflict):
			status = http.StatusConflict
		}
		writeJSON(w, status, map[string]any{"error": err.Error()})
		return
	}
	if result == nil {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, result)
}

type pointJSON struct {
	Timestamp *int64         `json:"timestamp"`
	Value     *pointValue    `json:"value"`
	Context   map[string]any `json:"context"`
}

// pointValue is a point's value in a control body: a JSON number, or NaN,
// Infinity or -Infinity as a bare token (Python's json) or a string.
type pointValue float64

// UnmarshalJSON reads a number or one of the non-finite names.
func (v *pointValue) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err == nil {
		*v = pointValue(f)
		return nil
	}
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return fmt.Errorf("value %s: want a number, NaN, Infinity or -Infinity", b)
	}
	switch name {
	case "NaN":
		*v = pointValue(math.NaN())
	case "Infinity":
		*v = pointValue(math.Inf(1))
	case "-Infinity":
		*v = pointValue(math.Inf(-1))
	default:
		return fmt.Errorf("value %q: want a number, NaN, Infinity or -Infinity", name)
	}
	return nil
}

// quoteNonFinite turns the bare tokens NaN, Infinity and -Infinity outside
// strings into JSON strings, so that encoding/json reads Python's output.
func quoteNonFinite(b []byte) []byte {
	out := make([]byte, 0, len(b)+16)
	var q jsonQuote
	for i := 0; i < len(b); i++ {
		c := b[i]
		if q.step(c) {
			out = append(out, c)
			continue
		}
		quoted := false
		for _, tok := range []string{"NaN", "Infinity", "-Infinity"} {
			if bytes.HasPrefix(b[i:], []byte(tok)) {
				out = append(out, '"')
				out = append(out, tok...)
				out = append(out, '"')
				i += len(tok) - 1
				quoted = true
				break
			}
		}
		if !quoted {
			out = append(out, c)
		}
	}
	return out
}

// pointOut is a point as the control interface renders it; Value is a
// float64 or a non-finite placeholder (see jsonFloat).
type pointOut struct {
	Timestamp int64          `json:"timestamp"`
	Value     any            `json:"value"`
	Context   map[string]any `json:"context"`
}

// control dispatches one control request; a nil result means no body.
func (s *Sim) control(r *http.Request, seg []string) (any, int, error) {
	m := r.Method
	n := len(seg)
	notAllowed := &controlError{status: http.StatusMethodNotAllowed, msg: fmt.Sprintf("%s not allowed on %s", m, r.URL.Path)}
	switch {
	case n == 1 && seg[0] == "info":
		s.mu.RLock()
		nd, nv := len(s.devices), len(s.vars)
		s.mu.RUnlock()
		return map[string]any{
			"start_ms": s.start.UnixMilli(), "now_ms": s.now().UnixMilli(), "retention_floor_ms": s.floorMs(),
			"retention": s.retention.String(), "token_ttl": s.tokenTTL.String(), "devices": nd, "variables": nv,
			"seed": s.opts.Seed, "count_as_bool": s.opts.CountAsBool,
			"last_activity": s.opts.LastActivity.String(), "public_url": s.publicURL,
			"series_cut": s.opts.SeriesOrder.Cut.String(), "series_order": s.opts.SeriesOrder.Rows.String(),
			"context_bytes": s.opts.ContextBytes, "results_first": s.opts.ResultsFirst,
		}, http.StatusOK, nil
	case n == 1 && seg[0] == "counters":
		switch m {
		case http.MethodGet:
			return s.Counters(), http.StatusOK, nil
		case http.MethodDelete:
			s.ResetCounters()
			return nil, http.StatusNoContent, nil
		}
		return nil, 0, notAllowed
	case n == 1 && seg[0] == "served":
		if m != http.MethodGet {
			return nil, 0, notAllowed
		}
		return map[string]int64{"raw_series_rows": s.RowsServed()}, http.StatusOK, nil
	case n == 1 && seg[0] == "points":
		if m != http.MethodPost {
			return nil, 0, notAllowed
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, maxBodySize))
		if err != nil {
			return nil, 0, badRequest("body: %v", err)
		}
		var body map[string][]pointJSON
		dec := json.NewDecoder(bytes.NewReader(quoteNonFinite(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			return nil, 0, badRequest("body: %v", err)
		}
		pts := make(map[string][]SimPoint, len(body))
		added := 0
		for id, ps := range body {
			for i, p := range ps {
				if p.Timestamp == nil || p.Value == nil {
					return nil, 0, badRequest("variable %s, point %d: timestamp and value are required", id, i)
				}
				pts[id] = append(pts[id], SimPoint{TimestampMs: *p.Timestamp, Value: float64(*p.Value), Context: p.Context})
			}
			added += len(ps)
		}
		if err := s.AddPointsMany(pts); err != nil {
			return nil, 0, err
		}
		return map[string]any{"added": added}, http.StatusOK, nil
	case n == 2 && seg[0] == "counters" && seg[1] == "reset":
		if m != http.MethodPost {
			return nil, 0, notAllowed
		}
		s.ResetCounters()
		return nil, http.StatusNoContent, nil
	case seg[0] == "ratelimit":
		return s.controlRateLimit(r, seg[1:])
	case n == 1 && seg[0] == "faults":
		switch m {
		case http.MethodGet:
			return toFaultsJSON(s.CurrentFaults()), http.StatusOK, nil
		case http.MethodPut, http.MethodPost:
			var fj faultsJSON
			if err := decodeStrict(r, &fj); err != nil {
				return nil, 0, err
			}
			f, err := fj.faults()
			if err != nil {
				return nil, 0, badRequest("faults: %v", err)
			}
			s.SetFaults(f)
			return toFaultsJSON(s.CurrentFaults()), http.StatusOK, nil
		case http.MethodDelete:
			s.SetFaults(Faults{})
			return nil, http.StatusNoContent, nil
		}
		return nil, 0, notAllowed
	case n == 1 && seg[0] == "devices":
		switch m {
		case http.MethodGet:
			return s.Devices(), http.StatusOK, nil
		case http.MethodPost:
			var body struct {
				Label     string `json:"label"`
				Variables int    `json:"variables"`
			}
			if err := decodeStrict(r, &body); err != nil {
				return nil, 0, err
			}
			d, err := s.AddDevice(body.Label, body.Variables)
			if err != nil && !errors.Is(err, ErrConflict) {
				return nil, 0, badRequest("%v", err)
			}
			return d, http.StatusCreated, err
		}
		return nil, 0, notAllowed
	case n == 2 && seg[0] == "devices":
		if m != http.MethodDelete {
			return nil, 0, notAllowed
		}
		return nil, http.StatusNoContent, s.DeleteDevice(seg[1])
	case n == 3 && seg[0] == "variables" && seg[2] == "points":
		switch m {
		case http.MethodGet:
			pts := s.Points(seg[1])
			if pts == nil && s.PointCount(seg[1]) < 0 {
				return nil, 0, fmt.Errorf("variable %s: %w", seg[1], ErrNotFound)
			}
			out := make([]pointOut, 0, len(pts))
			for _, p := range pts {
				out = append(out, pointOut{Timestamp: p.TimestampMs, Value: jsonFloat(p.Value), Context: p.Context})
			}
			return out, http.StatusOK, nil
		case http.MethodPost:
			raw, err := io.ReadAll(io.LimitReader(r.Body, maxBodySize))
			if err != nil {
				return nil, 0, badRequest("body: %v", err)
			}
			var body []pointJSON
			dec := json.NewDecoder(bytes.NewReader(quoteNonFinite(raw)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				return nil, 0, badRequest("body: %v", err)
			}
			pts := make([]SimPoint, 0, len(body))
			for i, p := range body {
				if p.Timestamp == nil || p.Value == nil {
					return nil, 0, badRequest("point %d: timestamp and value are required", i)
				}
				pts = append(pts, SimPoint{TimestampMs: *p.Timestamp, Value: float64(*p.Value), Context: p.Context})
			}
			if err := s.AddPoints(seg[1], pts); err != nil {
				return nil, 0, err
			}
			return map[string]any{"added": len(pts)}, http.StatusOK, nil
		}
		return nil, 0, notAllowed
	case n == 2 && seg[0] == "variables":
		if m != http.MethodDelete {
			return nil, 0, notAllowed
		}
		return nil, http.StatusNoContent, s.DeleteVariable(seg[1])
	case n == 1 && seg[0] == "groups" && m == http.MethodGet:
		return s.Groups(), http.StatusOK, nil
	case n == 1 && seg[0] == "organizations" && m == http.MethodGet:
		return s.Organizations(), http.StatusOK, nil
	case n == 1 && seg[0] == "events" && m == http.MethodGet:
		return s.Events(), http.StatusOK, nil
	case n == 1 && seg[0] == "tokens":
		if m != http.MethodPost {
			return nil, 0, notAllowed
		}
		var body struct {
			Token string `json:"token"`
			Kind  string `json:"kind"`
			TTL   string `json:"ttl"`
		}
		if err := decodeStrict(r, &body); err != nil {
			return nil, 0, err
		}
		if body.Token == "" {
			return nil, 0, badRequest("token must not be empty")
		}
		kind, err := ParseTokenKind(body.Kind)
		if err != nil {
			return nil, 0, badRequest("%v", err)
		}
		var ttl time.Duration
		if body.TTL != "" {
			if ttl, err = time.ParseDuration(body.TTL); err != nil {
				return nil, 0, badRequest("ttl: %v", err)
			}
		}
		s.AddToken(body.Token, kind, ttl)
		return nil, http.StatusNoContent, nil
	case n == 2 && seg[0] == "tokens" && seg[1] == "expire":
		if m != http.MethodPost {
			return nil, 0, notAllowed
		}
		s.ExpireTokens()
		return nil, http.StatusNoContent, nil
	}
	return nil, 0, &controlError{status: http.StatusNotFound, msg: "unknown control endpoint " + r.URL.Path}
}
