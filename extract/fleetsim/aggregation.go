package fleetsim

import (
	"net/http"
)

// POST /data/stats/aggregation/

func (s *Sim) postAggregation(w http.ResponseWriter, r *http.Request, _ []string, _ TokenKind) {
	q, ok := s.parseDataQuery(w, r, "AggregationSchema", false)
	if !ok {
		return
	}
	lo, hi, limit := q.window(s.floorMs())
	fn := q.agg
	if fn == "average" {
		fn = "mean"
	}
	res := make([]aggResult, len(q.vars))
	for i, vs := range q.vars {
		c := vs.ser.cursor(lo, hi)
		res[i] = aggregate(&c, limit, fn)
	}
	var b []byte
	if !q.join {
		b = append(b, `{"results":[`...)
		for i, a := range res {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"value":`...)
			if a.hasValue {
				b = appendFloat(b, roundTo(a.v, q.precision))
			} else {
				b = append(b, "null"...)
			}
			b = append(b, `,"timestamp":`...)
			if a.hasTs {
				b = appendInt(b, a.ts)
			} else {
				b = append(b, "null"...)
			}
			if fn == "raw" {
				b = append(b, `,"context":`...)
				if a.ctx != nil {
					b = append(b, a.ctx...)
				} else {
					b = append(b, "null"...)
				}
			}
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	} else {
		// One frame: rows outer-joined on the aggregate's timestamp, newest
		// first; an aggregate without a timestamp (empty input) joins no row.
		b = append(b, `{"columns":["timestamp"`...)
		for _, vs := range q.vars {
			b = append(b, ',')
			b = appendJSONString(b, vs.id+".value")
		}
		b = append(b, `],"results":[`...)
		used := make([]bool, len(res))
		first := true
		for {
			best, found := int64(0), false
			for i, a := range res {
				if !used[i] && a.hasTs && (!found || a.ts > best) {
					best, found = a.ts, true
				}
			}
			if !found {
				break
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '[')
			b = appendInt(b, best)
			for i, a := range res {
				b = append(b, ',')
				if !used[i] && a.hasTs && a.ts == best {
					used[i] = true
					b = appendFloat(b, roundTo(a.v, q.precision))
				} else {
					b = append(b, "null"...)
				}
			}
			b = append(b, ']')
		}
		b = append(b, "]}"...)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
