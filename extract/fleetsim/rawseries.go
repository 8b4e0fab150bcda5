package fleetsim

import (
	"net/http"
)

// POST /data/raw/series

type colKind uint8

const (
	colValue colKind = iota
	colTimestamp
	colVarID
	colVarLabel
	colVarName
	colVarProps
	colContext
	colDevID
	colDevName
	colDevLabel
)

var colKinds = map[string]colKind{
	"value.value": colValue, "timestamp": colTimestamp, "variable.id": colVarID, "variable.label": colVarLabel,
	"variable.name": colVarName, "variable.properties": colVarProps, "value.context": colContext,
	"device.id": colDevID, "device.name": colDevName, "device.label": colDevLabel,
}

// appendCell appends one cell of the cursor's current point. The point
// cells of an undecodable variable (Faults.UndecodableVariables) carry what
// no decoder accepts: "n/a" for the value and the context, 1e30 for the
// timestamp (only per-variable frames have a timestamp cell of their own).
func appendCell(b []byte, k colKind, c *cursor, vs *varSnap, precision int) []byte {
	if vs.undecodable {
		switch k {
		case colValue, colContext:
			return append(b, `"n/a"`...)
		case colTimestamp:
			return append(b, "1e30"...)
		}
	}
	switch k {
	case colValue:
		v := c.value()
		if precision >= 0 {
			v = round(v, precision)
		}
		return appendFloat(b, v)
	case colTimestamp:
		return appendInt(b, c.ts)
	case colVarID:
		return append(b, vs.idJSON...)
	case colVarLabel:
		return append(b, vs.labelJSON...)
	case colVarName:
		return append(b, vs.nameJSON...)
	case colVarProps:
		return append(b, vs.props...)
	case colContext:
		return c.appendContext(b)
	case colDevID:
		return append(b, vs.devIDJSON...)
	case colDevName:
		return append(b, vs.devNameJSON...)
	default:
		return append(b, vs.devLabelJSON...)
	}
}

func (s *Sim) postRawSeries(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	q, ok := s.parseDataQuery(w, r, "RawSeriesSchema", true)
	if !ok {
		return
	}
	f := s.CurrentFaults()
	for _, vs := range q.vars {
		if contains(f.RejectVariables, vs.id) {
			msg := "Variable " + vs.id + " cannot be read: invalid data."
			writeJSON(w, http.StatusBadRequest, codeDetailBody{400001, msg, map[string][]string{"variables": {msg}}})
			return
		}
		vs.undecodable = contains(f.UndecodableVariables, vs.id)
	}
	lo, hi, limit := q.window(s.floorMs())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	st := newStream(w)
	var columns func()
	var results func() bool
	if q.join {
		columns, results = joinedParts(st, q, lo, hi, limit)
	} else {
		columns, results = frameParts(st, q, lo, hi, limit, s.opts.SeriesOrder, s.opts.Seed)
	}
	writeResponse(st, columns, results, s.opts.ResultsFirst)
	// Counted before the last bytes go out, so that a client that has
	// read the whole response finds its points counted.
	s.rowsServed.Add(st.points)
	st.flush()
}

// writeResponse writes the response object: `columns` then `results`, or
// the other way round with resultsFirst (Options.ResultsFirst). results
// returns false when the client is gone.
func writeResponse(st *stream, columns func(), results func() bool, resultsFirst bool) {
	if resultsFirst {
		st.buf = append(st.buf, `{"results":`...)
		if !results() {
			return
		}
		st.buf = append(st.buf, `,"columns":`...)
		columns()
		st.buf = append(st.buf, '}')
		return
	}
	st.buf = append(st.buf, `{"columns":`...)
	columns()
	st.buf = append(st.buf, `,"results":`...)
	if results() {
		st.buf = append(st.buf, '}')
	}
}

// frameParts writes one frame per variable, each with its own column
// list; every column but timestamp is prefixed with "<variable_id>.". Each
// frame keeps the points and serves them in the order order says, drawing
// its random choices from seed and the frame's variable, points and limit
// (see frameRand). It returns the writers of the `columns` and `results`
// values, for writeResponse to order.
func frameParts(st *stream, q *dataQuery, lo, hi int64, limit int, order SeriesOrder, seed int64) (columns func(), results func() bool) {
	kinds := make([]colKind, len(q.columns))
	for i, c := range q.columns {
		kinds[i] = colKinds[c]
	}
	columns = func() {
		st.buf = append(st.buf, '[')
		for i, vs := range q.vars {
			if i > 0 {
				st.buf = append(st.buf, ',')
			}
			st.buf = append(st.buf, '[')
			for j, c := range q.columns {
				if j > 0 {
					st.buf = append(st.buf, ',')
				}
				if kinds[j] == colTimestamp {
					st.buf = append(st.buf, `"timestamp"`...)
				} else {
					st.buf = appendJSONString(st.buf, vs.id+"."+c)
				}
			}
			st.buf = append(st.buf, ']')
		}
		st.buf = append(st.buf, ']')
	}
	results = func() bool {
		st.buf = append(st.buf, '[')
		for i, vs := range q.vars {
			if i > 0 {
				st.buf = append(st.buf, ',')
			}
			st.buf = append(st.buf, '[')
			if order != SeriesNewest {
				for k, c := range orderedFrame(&vs.ser, vs.id, lo, hi, limit, order, seed) {
					if !writeRow(st, k, kinds, &c, vs, q.precision) {
						return false
					}
				}
				st.buf = append(st.buf, ']')
				continue
			}
			c := vs.ser.cursor(lo, hi)
			for k := 0; (limit < 0 || k < limit) && c.next(); k++ {
				if !writeRow(st, k, kinds, &c, vs, q.precision) {
					return false
				}
			}
			st.buf = append(st.buf, ']')
		}
		st.buf = append(st.buf, ']')
		return true
	}
	return columns, results
}

// joinedParts writes one frame: timestamp first and unprefixed, then each
// variable's block of "<variable_id>.<column>" in request order; rows are
// outer-joined on timestamp (newest first) with null cells for a variable
// without a point there. It returns the writers of the `columns` and
// `results` values, for writeResponse to order.
func joinedParts(st *stream, q *dataQuery, lo, hi int64, limit int) (columns func(), results func() bool) {
	var kinds []colKind
	var names []string
	for _, c := range q.columns {
		if k := colKinds[c]; k != colTimestamp {
			kinds = append(kinds, k)
			names = append(names, c)
		}
	}
	columns = func() {
		st.buf = append(st.buf, `["timestamp"`...)
		for _, vs := range q.vars {
			for _, n := range names {
				st.buf = append(st.buf, ',')
				st.buf = appendJSONString(st.buf, vs.id+"."+n)
			}
		}
		st.buf = append(st.buf, ']')
	}
	results = func() bool {
		st.buf = append(st.buf, '[')
		if !writeJoinedRows(st, q, kinds, lo, hi, limit) {
			return false
		}
		st.buf = append(st.buf, ']')
		return true
	}
	return columns, results
}

// writeJoinedRows writes the joined frame's rows; false when the client
// is gone.
func writeJoinedRows(st *stream, q *dataQuery, kinds []colKind, lo, hi int64, limit int) bool {
	nv := len(q.vars)
	curs := make([]cursor, nv)
	left := make([]int, nv) // points each variable may still give (-1: no cap)
	heads := make([]int64, nv)
	live := make([]bool, nv)
	for i, vs := range q.vars {
		curs[i] = vs.ser.cursor(lo, hi)
		left[i] = limit
		if left[i] != 0 {
			heads[i], live[i] = curs[i].peek()
		}
	}
	var nulls []byte
	for range kinds {
		nulls = append(nulls, ",null"...)
	}
	first := true
	for {
		found := false
		var ts int64
		for i := 0; i < nv; i++ {
			if live[i] && (!found || heads[i] > ts) {
				ts, found = heads[i], true
			}
		}
		if !found {
			return true
		}
		if !first {
			st.buf = append(st.buf, ',')
		}
		first = false
		st.buf = append(st.buf, '[')
		st.buf = appendInt(st.buf, ts)
		for i := 0; i < nv; i++ {
			if !live[i] || heads[i] != ts {
				st.buf = append(st.buf, nulls...)
				continue
			}
			c := &curs[i]
			c.next()
			st.points++
			for _, kind := range kinds {
				st.buf = append(st.buf, ',')
				st.buf = appendCell(st.buf, kind, c, q.vars[i], q.precision)
			}
			if left[i] > 0 {
				left[i]--
			}
			if left[i] == 0 {
				live[i] = false
			} else {
				heads[i], live[i] = c.peek()
			}
		}
		st.buf = append(st.buf, ']')
		if len(st.buf) >= 32<<10 {
			st.flush()
			if st.err != nil {
				return false
			}
		}
	}
}

// writeRow writes the k-th row of a per-variable frame at the cursor's
// point; false when the client is gone.
func writeRow(st *stream, k int, kinds []colKind, c *cursor, vs *varSnap, precision int) bool {
	if k > 0 {
		st.buf = append(st.buf, ',')
	}
	st.points++
	st.buf = append(st.buf, '[')
	for j, kind := range kinds {
		if j > 0 {
			st.buf = append(st.buf, ',')
		}
		st.buf = appendCell(st.buf, kind, c, vs, precision)
	}
	st.buf = append(st.buf, ']')
	if len(st.buf) >= 32<<10 {
		st.flush()
		if st.err != nil {
			return false
		}
	}
	return true
}
