package fleetsim

import (
	"math"
	"net/http"
	"strconv"
)

// GET statistics.

var statFuncs = map[string]bool{"mean": true, "min": true, "max": true, "sum": true, "count": true, "first": true, "last": true, "std": true}

// aggResult is an aggregate of one variable's input series.
type aggResult struct {
	hasValue bool
	v        float64
	ts       int64
	hasTs    bool
	ctx      []byte
}

// aggregate computes fn over at most limit (-1: all) points of c, newest
// first. Timestamps: the chosen point for min, max, first, last and raw; the
// newest input point for mean, sum, count and std.
func aggregate(c *cursor, limit int, fn string) aggResult {
	var res aggResult
	var n int
	var sum, mean, m2 float64
	var newestTs int64
	for k := 0; (limit < 0 || k < limit) && c.next(); k++ {
		v := c.value()
		if n == 0 {
			newestTs = c.ts
		}
		n++
		sum += v
		d := v - mean
		mean += d / float64(n)
		m2 += d * (v - mean)
		switch fn {
		case "min":
			if n == 1 || v < res.v {
				res.v, res.ts = v, c.ts
			}
		case "max":
			if n == 1 || v > res.v {
				res.v, res.ts = v, c.ts
			}
		case "first": // the earliest input point: the last one visited
			res.v, res.ts = v, c.ts
		case "last", "raw":
			if n == 1 {
				res.v, res.ts = v, c.ts
				res.ctx = c.appendContext(nil)
			}
		}
	}
	switch fn {
	case "count":
		return aggResult{hasValue: true, v: float64(n), ts: newestTs, hasTs: n > 0}
	case "sum":
		return aggResult{hasValue: true, v: sum, ts: newestTs, hasTs: n > 0}
	}
	if n == 0 {
		return aggResult{}
	}
	switch fn {
	case "mean", "average":
		res.v, res.ts = mean, newestTs
	case "std":
		res.v, res.ts = math.Sqrt(m2/float64(n)), newestTs
	}
	res.hasValue, res.hasTs = true, true
	return res
}

func (s *Sim) getStatistics(w http.ResponseWriter, _ *http.Request, p []string, _ TokenKind) {
	vs, ok := s.snapVar(p[0])
	if !ok {
		errNotFound(w)
		return
	}
	fn := p[1]
	if !statFuncs[fn] {
		// Not implemented: 200 with an empty object, not an error.
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	start, err1 := strconv.ParseInt(p[2], 10, 64)
	end, err2 := strconv.ParseInt(p[3], 10, 64)
	if err1 != nil || err2 != nil {
		errSchema(w, "StatisticsPathSchema", "start and end must be integers (POSIX milliseconds).")
		return
	}
	if start > end {
		errSchema(w, "StatisticsPathSchema", "start must not be after end.")
		return
	}
	floor := s.floorMs()
	if start < floor || end < floor {
		errRetention(w, false)
		return
	}
	c := vs.ser.cursor(start, end)
	res := aggregate(&c, -1, fn)
	b := append([]byte("{"), appendJSONString(nil, fn)...)
	b = append(b, ':')
	if res.hasValue {
		b = appendFloat(b, res.v)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
