package pipeline

import (
	"cmp"
	"math"
	"slices"
)

// The loaders aggregate the rows they load, per variable and hour, so that
// the rollups of a pass can often be written from what the pass itself
// loaded instead of being read back from the warehouse: a backfill's
// recompute otherwise reads every point it loaded again under FINAL, which
// costs ClickHouse about as much as inserting them did. The aggregates are
// only a candidate answer: the Rollup writes them only where the warehouse
// holds exactly the rows aggregated in those hours (see Aggregates), and
// recomputes everything else from the table as before.

// HourAgg is one hour of one variable's rows: the columns of a
// datapoints_hourly row. It is kept to 56 bytes (72 with every time in ms
// as int64): a backfill holds one for every hour of every row between the
// loader that aggregates the row and the commit that writes it, and that
// memory showed in the peak RSS of a backfill.
type HourAgg struct {
	// Hour is the start of the hour in hours since the epoch (UTC); see
	// HourMs.
	Hour int32
	// Count fits: the rows of an hour have distinct timestamps, so there
	// are at most 3.6 M of them.
	Count uint32
	// FirstMs and LastMs are the first and last timestamps in ms from the
	// start of the hour; see FirstTsMs and LastTsMs.
	FirstMs, LastMs       uint32
	Sum, Min, Max         float64
	FirstValue, LastValue float64
}

// HourMs is the start of the hour in POSIX ms.
func (h *HourAgg) HourMs() int64 { return int64(h.Hour) * HourMs }

// FirstTsMs is the timestamp of the hour's first row, in POSIX ms.
func (h *HourAgg) FirstTsMs() int64 { return h.HourMs() + int64(h.FirstMs) }

// LastTsMs is the timestamp of the hour's last row, in POSIX ms.
func (h *HourAgg) LastTsMs() int64 { return h.HourMs() + int64(h.LastMs) }

// hourAgg is the empty aggregate of the hour starting at hourMs.
func hourAgg(hourMs int64) HourAgg { return HourAgg{Hour: int32(hourMs / HourMs)} }

// add folds one point of h's hour into h.
func (h *HourAgg) add(ts int64, v float64) {
	off := uint32(ts - h.HourMs())
	if h.Count == 0 {
		*h = HourAgg{Hour: h.Hour, Count: 1, Sum: v, Min: v, Max: v, FirstValue: v, LastValue: v, FirstMs: off, LastMs: off}
		return
	}
	h.Count++
	h.Sum += v
	h.Min, h.Max = min(h.Min, v), max(h.Max, v)
	if off < h.FirstMs {
		h.FirstMs, h.FirstValue = off, v
	}
	if off > h.LastMs {
		h.LastMs, h.LastValue = off, v
	}
}

// merge folds o, an aggregate of other points of the same hour, into h.
func (h *HourAgg) merge(o HourAgg) {
	h.Count += o.Count
	h.Sum += o.Sum
	h.Min, h.Max = min(h.Min, o.Min), max(h.Max, o.Max)
	if o.FirstMs < h.FirstMs {
		h.FirstMs, h.FirstValue = o.FirstMs, o.FirstValue
	}
	if o.LastMs > h.LastMs {
		h.LastMs, h.LastValue = o.LastMs, o.LastValue
	}
}

// Aggregates are what a pass loaded for one variable, aggregated: the rows
// of its hourly rollup and its newest row. They equal the rollups over
// `datapoints FINAL` exactly when the table holds no other row in those
// hours and none newer than Latest: the rows aggregated are then all the
// table has there, and they hold each timestamp once (the loaders prove
// that, or give no Aggregates). A Rollup checks this before it uses them,
// by counting the table's rows in the hours (Rows) and reading its newest
// timestamp (Latest.TsMs).
type Aggregates struct {
	// Hours is in ascending order of Hour.
	Hours  []HourAgg
	Latest Row
	// Rows is the number of rows aggregated, the sum of the hours' counts.
	Rows int64
	// First says the variable had no mark: the table should hold no row
	// of it but these, so a Rollup may count all of its rows, which
	// proves the same and spares reading a timestamp column. Rows a crash
	// or another writer left make that count fail, which only costs a
	// recompute.
	First bool
}

// spanAgg is the aggregate of one Span's rows, computed by the loader from
// the chunk before the chunk is recycled.
type spanAgg struct {
	minTs, maxTs int64
	// hours in the span's row order (which is monotonic when ok).
	hours  []HourAgg
	latest Row
	rows   int
	// ok says the rows' timestamps are strictly monotonic (so distinct)
	// and their values finite: anything else is left to the recompute,
	// which then keeps exactly the SQL's semantics.
	ok bool
}

// maxDateTimeMs is the end of ClickHouse's DateTime (UInt32 seconds): the
// ts column of a point outside [0, maxDateTimeMs) is not its ts_ms's
// second, so its hour is left to the recompute.
const maxDateTimeMs = (1 << 32) * 1000

// HourMs is an hour in POSIX ms.
const HourMs = 3600 * 1000

// HourStart is the start of ms's hour in ms, rounding down as ClickHouse's
// toStartOfHour does for the ts column (the floor of ts_ms in seconds).
func HourStart(ms int64) int64 {
	h := ms - ms%HourMs
	if ms%HourMs < 0 {
		h -= HourMs
	}
	return h
}

// aggregateSpans computes the spanAgg of every span of c. Spans tile the
// chunk's rows in order; a chunk where they do not gets no aggregates.
func aggregateSpans(c *Batch) {
	total := 0
	for _, s := range c.Spans {
		total += s.Rows
	}
	if total != c.Len() {
		return
	}
	at := 0
	for i := range c.Spans {
		s := &c.Spans[i]
		s.agg = aggregateRows(c, at, at+s.Rows)
		at += s.Rows
	}
}

// aggregateRows aggregates the rows [from, to) of c, one variable's.
func aggregateRows(c *Batch, from, to int) *spanAgg {
	a := &spanAgg{rows: to - from, ok: to > from}
	if !a.ok {
		return a
	}
	ts, vals := c.TsMs[from:to], c.Value[from:to]
	a.minTs, a.maxTs = ts[0], ts[0]
	newest := 0
	desc := len(ts) > 1 && ts[1] < ts[0]
	// The hours are allocated once, at most their number (they live until
	// the commit, and a backfill holds many): a monotonic span has at most
	// one per hour between its ends, and at most one per row.
	span := HourStart(ts[len(ts)-1]) - HourStart(ts[0])
	a.hours = make([]HourAgg, 0, min(int64(len(ts)), max(span, -span)/HourMs+1))
	cur := -1
	for i, t := range ts {
		v := vals[i]
		if math.IsNaN(v) || math.IsInf(v, 0) || t < 0 || t >= maxDateTimeMs {
			a.ok = false
			return a
		}
		if i > 0 && (desc && t >= ts[i-1] || !desc && t <= ts[i-1]) {
			a.ok = false
			return a
		}
		if h := HourStart(t); cur < 0 || a.hours[cur].HourMs() != h {
			a.hours = append(a.hours, hourAgg(h))
			cur++
		}
		a.hours[cur].add(t, v)
		if t > a.maxTs {
			a.maxTs, newest = t, i
		}
		a.minTs = min(a.minTs, t)
	}
	r := from + newest
	a.latest = Row{VariableID: c.VariableID[r], DeviceID: c.DeviceID[r], DeviceLabel: c.DeviceLabel[r], VariableLabel: c.VariableLabel[r],
		TsMs: c.TsMs[r], Value: c.Value[r], Context: c.Context[r], Lat: c.Lat[r], Lng: c.Lng[r], HasLat: c.HasLat[r], HasLng: c.HasLng[r]}
	return a
}

// aggregatesOf joins the aggregates of a variable's spans. It returns nil
// when a span has none or is not ok, when two spans' ranges of timestamps
// overlap (the same point may have been loaded twice: a cut frame read
// again, a request retried mid-stream), or when the spans do not account
// for every row loaded.
func aggregatesOf(spans []*spanAgg, points int64) *Aggregates {
	if len(spans) == 0 {
		return nil
	}
	var rows int64
	for _, s := range spans {
		if s == nil || !s.ok {
			return nil
		}
		rows += int64(s.rows)
	}
	if rows != points {
		return nil
	}
	// A span's hours follow its rows, which are monotonic: ascending once
	// a descending span is reversed.
	for _, s := range spans {
		if len(s.hours) > 1 && s.hours[0].Hour > s.hours[1].Hour {
			slices.Reverse(s.hours)
		}
	}
	if len(spans) == 1 {
		s := spans[0]
		return &Aggregates{Hours: s.hours, Latest: s.latest, Rows: rows}
	}
	slices.SortFunc(spans, func(a, b *spanAgg) int { return cmp.Compare(a.minTs, b.minTs) })
	n := 0
	for i, s := range spans {
		if i > 0 && s.minTs <= spans[i-1].maxTs {
			return nil
		}
		n += len(s.hours)
	}
	// Disjoint spans in order of time have their hours in order too, but
	// for the one hour where a span ends and the next begins, merged.
	out := make([]HourAgg, 0, n)
	for _, s := range spans {
		for _, h := range s.hours {
			if k := len(out) - 1; k >= 0 && out[k].Hour == h.Hour {
				out[k].merge(h)
				continue
			}
			out = append(out, h)
		}
	}
	return &Aggregates{Hours: slices.Clip(out), Latest: spans[len(spans)-1].latest, Rows: rows}
}
