package fleetsim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// snapshotVar copies what a data read needs under the read lock, so the
// response streams without holding it.
type varSnap struct {
	id, label, name   string
	props             []byte
	devID, devLabel   string
	devName           string
	ser               series
	idJSON, labelJSON []byte
	nameJSON          []byte
	devIDJSON         []byte
	devLabelJSON      []byte
	devNameJSON       []byte
	// undecodable makes raw-series cells of this variable unreadable
	// (Faults.UndecodableVariables).
	undecodable bool
}

func (s *Sim) snapVar(id string) (*varSnap, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.vars[id]
	if !ok {
		return nil, false
	}
	props, _ := json.Marshal(v.properties)
	if v.properties == nil {
		props = []byte("{}")
	}
	return &varSnap{
		id: v.id, label: v.label, name: v.name, props: props,
		devID: v.dev.id, devLabel: v.dev.label, devName: v.dev.name, ser: v.ser,
		idJSON: appendJSONString(nil, v.id), labelJSON: appendJSONString(nil, v.label), nameJSON: appendJSONString(nil, v.name),
		devIDJSON: appendJSONString(nil, v.dev.id), devLabelJSON: appendJSONString(nil, v.dev.label), devNameJSON: appendJSONString(nil, v.dev.name),
	}, true
}

// Body schemas of the two POST endpoints.

type dataQuery struct {
	vars       []*varSnap
	join       bool
	start, end *int64
	limit      *int64
	precision  int // -1: full precision
	columns    []string
	agg        string
}

var rawColumns = []string{"value.value", "timestamp", "variable.id", "variable.label", "variable.name", "variable.properties", "value.context", "device.id", "device.name", "device.label"}

var aggNames = []string{"mean", "min", "max", "sum", "count", "first", "last", "average", "raw"}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func bodyInt(obj map[string]any, key string) (*int64, bool) {
	v, ok := obj[key]
	if !ok || v == nil {
		return nil, true
	}
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return nil, false
	}
	return &i, true
}

// parseDataQuery validates a Data API POST body against its schema and
// resolves the variables. It answers every error itself: malformed JSON
// ({detail}), schema errors ({description,status,message}), unknown
// variables (404001) and retention violations (403003).
func (s *Sim) parseDataQuery(w http.ResponseWriter, r *http.Request, schema string, raw bool) (*dataQuery, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return nil, false
	}
	obj, ok := body.(map[string]any)
	if !ok {
		errSchema(w, schema, fmt.Sprintf("_schema: Invalid input type: expected an object, got %s.", jsonTypeName(body)))
		return nil, false
	}
	q := &dataQuery{join: true, precision: -1}
	ids, ok := stringList(obj["variables"])
	if !ok || len(ids) == 0 {
		errSchema(w, schema, "variables: Must be a non-empty list of variable ids.")
		return nil, false
	}
	if v, present := obj["join_dataframes"]; present && v != nil {
		b, isBool := v.(bool)
		if !isBool {
			errSchema(w, schema, "join_dataframes: Not a valid boolean.")
			return nil, false
		}
		q.join = b
	}
	var okS, okE, okL, okP bool
	var prec *int64
	q.start, okS = bodyInt(obj, "start")
	q.end, okE = bodyInt(obj, "end")
	q.limit, okL = bodyInt(obj, "limit")
	prec, okP = bodyInt(obj, "precision")
	switch {
	case !okS:
		errSchema(w, schema, "start: Not a valid integer (POSIX milliseconds).")
		return nil, false
	case !okE:
		errSchema(w, schema, "end: Not a valid integer (POSIX milliseconds).")
		return nil, false
	case !okL:
		errSchema(w, schema, "limit: Not a valid integer.")
		return nil, false
	case !okP:
		errSchema(w, schema, "precision: Not a valid integer.")
		return nil, false
	case q.start != nil && q.end != nil && *q.start > *q.end:
		errSchema(w, schema, "start: Must not be after end.")
		return nil, false
	case q.limit != nil && *q.limit < 0:
		errSchema(w, schema, "limit: Must be greater than or equal to 0.")
		return nil, false
	case prec != nil && (*prec < 0 || *prec > 15):
		errSchema(w, schema, "precision: Must be between 0 and 15.")
		return nil, false
	}
	if prec != nil {
		q.precision = int(*prec)
	}
	if v, present := obj["tz"]; present && v != nil {
		tz, isStr := v.(string)
		if !isStr {
			errSchema(w, schema, "tz: Not a valid string.")
			return nil, false
		}
		if _, err := time.LoadLocation(tz); err != nil || strings.EqualFold(tz, "local") {
			errSchema(w, schema, fmt.Sprintf("tz: %q is not a valid IANA time-zone name.", tz))
			return nil, false
		}
	}
	if raw {
		q.columns = []string{"value.value", "timestamp"}
		if v, present := obj["columns"]; present && v != nil {
			cols, isList := stringList(v)
			if !isList || len(cols) == 0 {
				errSchema(w, schema, "columns: Must be a non-empty list of strings.")
				return nil, false
			}
			for _, c := range cols {
				if !contains(rawColumns, c) {
					errSchema(w, schema, fmt.Sprintf("columns: %q must be one of: %s.", c, strings.Join(rawColumns, ", ")))
					return nil, false
				}
			}
			q.columns = cols
		}
	} else {
		agg, isStr := obj["aggregation"].(string)
		if !isStr || !contains(aggNames, agg) {
			errSchema(w, schema, fmt.Sprintf("aggregation: Must be one of: %s.", strings.Join(aggNames, ", ")))
			return nil, false
		}
		q.agg = agg
	}
	for _, id := range ids {
		vs, ok := s.snapVar(id)
		if !ok {
			errNotFound(w)
			return nil, false
		}
		q.vars = append(q.vars, vs)
	}
	floor := s.floorMs()
	if (q.start != nil && *q.start < floor) || (q.end != nil && *q.end < floor) {
		errRetention(w, false)
		return nil, false
	}
	return q, true
}

// window turns the time-range rules into a range and a per-variable cap:
// neither bound gives the last 100 values (an explicit limit replaces that
// cap, 0 meaning all retained points); with a bound there is no implicit cap.
func (q *dataQuery) window(floor int64) (lo, hi int64, limit int) {
	lo, hi, limit = floor, maxTs, -1
	if q.start != nil {
		lo = *q.start
	}
	if q.end != nil {
		hi = *q.end
	}
	if q.start == nil && q.end == nil {
		limit = 100
	}
	if q.limit != nil {
		if *q.limit == 0 {
			limit = -1
		} else {
			limit = int(min(*q.limit, math.MaxInt32))
		}
	}
	return lo, hi, limit
}
