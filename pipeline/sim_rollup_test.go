package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The model of the analyst tables. It keeps the contract of
// load/clickhouse's Recompute: each call replaces the hourly rows of every
// hour its ranges cover, and each variable's latest row, with what the
// warehouse holds at that moment (a later call sees at least as much, so
// the last one wins, as the versions make it in ClickHouse). An hourly row
// is kept as the points of its hour, which gives count, sum, min, max,
// first and last at once; the latest row as its point's timestamp. What
// it checks is the engine's half: that the ranges handed to the hook,
// through crashes, failed hooks, stopped passes and concurrent writers,
// cover every point the warehouse ends up holding.

const simHourMs = 3600 * 1000

// simHour is the start of ms's hour, as toStartOfHour gives it.
func simHour(ms int64) int64 {
	ms = max(ms, -(1 << 62))
	h := ms - ms%simHourMs
	if ms%simHourMs < 0 {
		h -= simHourMs
	}
	return h
}

// simTables are the model analyst tables.
type simTables struct {
	hourly map[string]map[int64]map[int64]float64 // variable → hour → ts → value
	latest map[string]int64                       // variable → ts of its latest row
}

// simRollup is the Rollup hook as one process calls it.
type simRollup struct{ p *simProc }

func (r simRollup) Recompute(_ context.Context, touched []Touched) error {
	w := r.p.w
	content := sortedIDs(touched, func(t Touched) string { return t.VariableID })
	w.sched.call("rollup " + content)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := r.p.write("rollup", content, "rollup"); err != nil {
		return err
	}
	r.p.moment(featAtCommit, "rollup", content, touchedIDs(touched), 0, 0)
	// The hourly and latest statements are separate: either may fail
	// after the other landed.
	failHourly, failLatest := false, false
	level := w.cfg.level(faultRollup)
	switch x := w.draw("rollup", content) % 1000; {
	case !w.quiet && float64(x) < 20*level:
		failHourly = true
	case !w.quiet && float64(x) < 40*level:
		failLatest = true
	}
	if !failHourly {
		for _, t := range touched {
			w.recomputeHours(t.VariableID, simHour(t.FromMs), simHour(t.ToMs)+simHourMs)
		}
	}
	if !failLatest {
		for _, t := range touched {
			from := simHour(t.FromMs)
			if t.Loaded {
				from = simHour(t.ToMs)
			}
			w.recomputeLatest(t.VariableID, from)
		}
	}
	if failHourly || failLatest {
		return &simError{msg: "rollup: INSERT failed", retryable: true}
	}
	return nil
}

// recomputeHours replaces the rows of the hours [lo, hi) of id with its
// stored points there; an hour without points gets no row (INSERT ...
// SELECT writes none). Caller holds w.mu.
func (w *simWorld) recomputeHours(id string, lo, hi int64) {
	if w.tables.hourly == nil {
		w.tables = simTables{hourly: map[string]map[int64]map[int64]float64{}, latest: map[string]int64{}}
	}
	fresh := map[int64]map[int64]float64{}
	for ts, v := range w.stored[id] {
		if ts < lo || ts >= hi {
			continue
		}
		h := simHour(ts)
		if fresh[h] == nil {
			fresh[h] = map[int64]float64{}
		}
		fresh[h][ts] = v
	}
	if len(fresh) == 0 {
		return
	}
	if w.tables.hourly[id] == nil {
		w.tables.hourly[id] = map[int64]map[int64]float64{}
	}
	maps.Copy(w.tables.hourly[id], fresh)
}

// recomputeLatest replaces id's latest row with its newest stored point at
// or after from, when it has one. Caller holds w.mu.
func (w *simWorld) recomputeLatest(id string, from int64) {
	if w.tables.latest == nil {
		w.tables = simTables{hourly: map[string]map[int64]map[int64]float64{}, latest: map[string]int64{}}
	}
	newest, ok := int64(0), false
	for ts := range w.stored[id] {
		if ts >= from && (!ok || ts > newest) {
			newest, ok = ts, true
		}
	}
	if ok {
		w.tables.latest[id] = newest
	}
}

// checkTables compares the model tables with the aggregates of every point
// the warehouse holds, of every variable the source still has. A variable
// deleted in the source is left out: points a stopped pass loaded for it
// are never handed to the hook again (verify finds and repairs those
// hours). Caller holds w.mu.
func (w *simWorld) checkTables(when string) {
	for _, v := range w.vars {
		if v.deleted {
			continue
		}
		stored := w.stored[v.id]
		want := map[int64]map[int64]float64{}
		var newest int64
		for ts, val := range stored {
			h := simHour(ts)
			if want[h] == nil {
				want[h] = map[int64]float64{}
			}
			want[h][ts] = val
			newest = max(newest, ts)
		}
		got := w.tables.hourly[v.id]
		var wrong []string
		for h, pts := range want {
			if !maps.Equal(got[h], pts) {
				wrong = append(wrong, fmt.Sprintf("hour %+d h: %d points in the row, %d stored", (h-simHour(simStart))/simHourMs, len(got[h]), len(pts)))
			}
		}
		for h := range got {
			if want[h] == nil {
				wrong = append(wrong, fmt.Sprintf("hour %+d h: a row, no point stored", (h-simHour(simStart))/simHourMs))
			}
		}
		if len(wrong) > 0 {
			slices.Sort(wrong)
			w.violate("%s, %s's hourly rows differ from its stored points (mark %+v): %s", when, v.id, w.marks[v.id], strings.Join(wrong, "; "))
		}
		if latest, ok := w.tables.latest[v.id]; len(stored) > 0 && (!ok || latest != newest) {
			w.violate("%s, %s's latest row is at %+d ms (present: %v), its newest stored point at %+d ms", when, v.id, latest-simStart, ok, newest-simStart)
		}
	}
}
