package clickhouse

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// The analyst tables' rows of what this process loaded, kept as the rows
// pass through its INSERTs, so that a recompute can write them without
// reading datapoints under FINAL when a cheap query proves they are what
// FINAL holds. On a dense backfill the FINAL read is most of what the
// tables cost (a single-threaded merge of every point); the proof reads
// two key columns and the version.
//
// What is kept. For each variable, a held state: the hourly aggregates
// and the newest row of the rows appended to it, their count N, and V,
// the versions of the INSERTs that appended to it and were acknowledged.
// A state is spoiled (and its aggregates dropped) when an INSERT that
// appended to it fails, when an INSERT appends rows of the variable to
// two states (one was taken by a recompute while the INSERT ran), when
// its rows are not pairwise distinct in ts_ms (checked by keeping each
// run of rows strictly monotonic and the runs' ranges disjoint), when
// they come from two devices, hold a value that is not finite, or when
// the process holds more than maxHeldHours hours. So:
//
//	(I) every row of datapoints whose (variable_id, version) is in V is a
//	    row of the state, and the state's rows have distinct keys.
//
// The proof. When a recompute takes a state that is not spoiled and no
// INSERT is still appending to, it counts, without FINAL, the rows of the
// variable at or after F (the earlier of the range's first hour and the
// state's) and those among them whose version is in V. If both are N,
// then by (I) the rows present are rows of the state, N of them with
// distinct keys, so they are all of the state's rows and nothing else:
// FINAL over [F, ∞) is exactly the state (no other writer's version of
// any key is present, merged or not, and no row of the state was merged
// away, since whatever replaced it would be present). Every hour from F
// on and the variable's newest point are then the state's, and are
// written with a version taken before the count, which makes them race
// with other writers' recomputes exactly as a recompute's own rows do
// (rollup.go). Anything else (another writer's rows, a merge that
// already replaced a row, rows of ours outside the state) breaks one of
// the equalities, and the variable is recomputed from FINAL as always: a
// failed proof costs one cheap query, never an inexact row.
//
// On a cluster the states are not kept: the rows would have to carry
// their shard's key, and the recompute reads through the replica barrier.

// maxHeldHours bounds the hourly aggregates held by a process: about
// 90 bytes each, 45 MB at most. A dense backfill of 500 variables over
// 30 days holds 360,000; past the bound, variables are recomputed.
const maxHeldHours = 1 << 19

// maxHeldVars bounds the states a process holds: rows of more variables
// than that loaded between two recomputes are recomputed. A state with one
// hour costs about 600 bytes, so this is about 10 MB however large the
// fleet; a backfill's dense variables fit many times over.
const maxHeldVars = 1 << 14

// maxHeldRuns bounds the runs of rows (each a range of ts_ms) a state
// checks new runs against: a variable read in more pieces than that is
// recomputed.
const maxHeldRuns = 64

// hourAgg is one hour's row of datapoints_hourly as the rows come in.
type hourAgg struct {
	count                 uint64
	sum, min, max         float64
	firstValue, lastValue float64
	firstTs, lastTs       int64
}

func (a *hourAgg) add(ts int64, v float64) {
	if a.count == 0 {
		*a = hourAgg{count: 1, sum: v, min: v, max: v, firstValue: v, lastValue: v, firstTs: ts, lastTs: ts}
		return
	}
	a.count++
	a.sum += v
	a.min = min(a.min, v)
	a.max = max(a.max, v)
	if ts < a.firstTs {
		a.firstTs, a.firstValue = ts, v
	}
	if ts > a.lastTs {
		a.lastTs, a.lastValue = ts, v
	}
}

// heldRow is the newest row of a state, its strings copied: the batch
// they came from is reused.
type heldRow struct {
	deviceLabel, variableLabel, context string
	ts                                  int64
	value                               float64
	lat, lng                            *float64
}

// heldVar is one variable's held state.
type heldVar struct {
	hours    map[int64]hourAgg
	rows     uint64
	minTs    int64
	device   string
	latest   heldRow
	runs     [][2]int64 // closed ranges of ts_ms, pairwise disjoint
	versions []uint64   // V
	pending  int        // INSERTs that appended to it and have not ended
	spoiled  bool
}

// heldSet is every held state of a Client.
type heldSet struct {
	mu    sync.Mutex
	vars  map[string]*heldVar
	hours int
	// written counts the variables whose rows were written from their
	// state, for tests.
	written int
}

func newHeldSet() *heldSet { return &heldSet{vars: map[string]*heldVar{}} }

// spoil drops v's aggregates; set.mu is held.
func (s *heldSet) spoil(v *heldVar) {
	if v.spoiled {
		return
	}
	s.hours -= len(v.hours)
	v.spoiled, v.hours, v.runs, v.versions = true, nil, nil, nil
	v.latest = heldRow{}
}

// heldAppends is what one INSERT appended to: the state of each variable.
type heldAppends map[string]*heldVar

// append adds the rows of ch to the states of their variables, on behalf
// of the INSERT whose appends are in. It is called before the rows are
// sent, so a state may hold rows that never land: end spoils it then.
func (s *heldSet) append(in heldAppends, ch *pipeline.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := ch.Len()
	for i := 0; i < n; {
		j := i + 1
		for j < n && ch.VariableID[j] == ch.VariableID[i] {
			j++
		}
		s.appendRun(in, ch, i, j)
		i = j
	}
}

// appendRun adds rows [i, j) of ch, all of one variable.
func (s *heldSet) appendRun(in heldAppends, ch *pipeline.Batch, i, j int) {
	id := ch.VariableID[i]
	v := s.vars[id]
	if v == nil {
		if len(s.vars) >= maxHeldVars {
			// Untracked rows carry a version in no state's V: a proof
			// that meets them fails.
			return
		}
		v = &heldVar{hours: map[int64]hourAgg{}, minTs: math.MaxInt64}
		s.vars[id] = v
	}
	switch prev, ok := in[id]; {
	case !ok:
		in[id] = v
		v.pending++
	case prev != v:
		// A recompute took the state this INSERT appended to before: its
		// version would be in neither state with all its rows, so (I)
		// holds only if neither proves anything.
		s.spoil(prev)
		s.spoil(v)
		return
	}
	if v.spoiled {
		return
	}
	lo, hi, newest, ok := checkRun(ch, i, j)
	if ok && v.device == "" && len(v.runs) == 0 {
		v.device = strings.Clone(ch.DeviceID[i])
	}
	if !ok || ch.DeviceID[i] != v.device || len(v.runs) == maxHeldRuns {
		s.spoil(v)
		return
	}
	for _, r := range v.runs {
		if lo <= r[1] && r[0] <= hi {
			s.spoil(v)
			return
		}
	}
	v.runs = append(v.runs, [2]int64{lo, hi})
	var cur hourAgg
	curHour := int64(math.MinInt64)
	for k := i; k < j; k++ {
		ts := ch.TsMs[k]
		if h := hourStart(ts); h != curHour {
			if curHour != math.MinInt64 {
				v.hours[curHour] = cur
			}
			curHour = h
			var had bool
			if cur, had = v.hours[h]; !had {
				s.hours++
			}
		}
		cur.add(ts, ch.Value[k])
	}
	v.hours[curHour] = cur
	v.rows += uint64(j - i)
	v.minTs = min(v.minTs, lo)
	if v.rows == uint64(j-i) || ch.TsMs[newest] > v.latest.ts {
		v.latest = heldRow{
			deviceLabel:   strings.Clone(ch.DeviceLabel[newest]),
			variableLabel: strings.Clone(ch.VariableLabel[newest]),
			context:       strings.Clone(ch.Context[newest]),
			ts:            ch.TsMs[newest],
			value:         ch.Value[newest],
			lat:           heldNullable(ch.Lat, ch.HasLat, newest),
			lng:           heldNullable(ch.Lng, ch.HasLng, newest),
		}
	}
	if s.hours > maxHeldHours {
		s.spoil(v)
	}
}

// checkRun returns the range of rows [i, j) and the index of the newest,
// ok when their timestamps are strictly monotonic (so distinct) and their
// values finite, and they share one device.
func checkRun(ch *pipeline.Batch, i, j int) (lo, hi int64, newest int, ok bool) {
	lo, hi, newest = ch.TsMs[i], ch.TsMs[i], i
	up := j-i > 1 && ch.TsMs[i+1] > ch.TsMs[i]
	for k := i; k < j; k++ {
		ts, x := ch.TsMs[k], ch.Value[k]
		if math.IsNaN(x) || math.IsInf(x, 0) || ch.DeviceID[k] != ch.DeviceID[i] {
			return 0, 0, 0, false
		}
		if k > i {
			if prev := ch.TsMs[k-1]; up && ts <= prev || !up && ts >= prev {
				return 0, 0, 0, false
			}
		}
		if ts > hi {
			hi, newest = ts, k
		}
		lo = min(lo, ts)
	}
	return lo, hi, newest, true
}

func heldNullable(x []float64, has []bool, k int) *float64 {
	if k >= len(has) || !has[k] {
		return nil
	}
	f := x[k]
	return &f
}

// end is called once per INSERT that appended: its version joins V of
// every state it appended to when it was acknowledged; otherwise some of
// its rows may be stored and some not, and the states are spoiled.
func (s *heldSet) end(in heldAppends, version uint64, acked bool) {
	if len(in) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range in {
		v.pending--
		if !acked {
			s.spoil(v)
		} else if !v.spoiled {
			v.versions = append(v.versions, version)
		}
	}
}

// take removes and returns the states of the touched variables that may
// prove their rows: not spoiled, not appended to by an INSERT still open,
// holding rows, and handed as loaded. Every touched state is removed, so
// that rows loaded from now on start a new one; the others are spoiled,
// since an open INSERT may still end them.
func (s *heldSet) take(touched []pipeline.Touched) map[string]*heldVar {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*heldVar{}
	for _, t := range touched {
		v := s.vars[t.VariableID]
		if v == nil {
			continue
		}
		delete(s.vars, t.VariableID)
		if v.spoiled || v.pending > 0 || v.rows == 0 || !t.Loaded {
			s.spoil(v)
			continue
		}
		// No INSERT holds it any more: it leaves the set's count.
		s.hours -= len(v.hours)
		out[t.VariableID] = v
	}
	return out
}

// writeHeld writes the rows of the touched variables whose held state the
// proof shows to be what FINAL holds, and returns the others, to be
// recomputed.
func (c *Client) writeHeld(ctx context.Context, touched []pipeline.Touched) ([]pipeline.Touched, error) {
	if c.held == nil {
		return touched, nil
	}
	states := c.held.take(touched)
	if len(states) == 0 {
		return touched, nil
	}
	version := c.NextVersion()
	from := map[string]int64{}
	for _, t := range touched {
		if v := states[t.VariableID]; v != nil {
			from[t.VariableID] = min(hourStart(t.FromMs), hourStart(v.minTs))
		}
	}
	proved, err := c.proveHeld(ctx, states, from)
	if err != nil {
		return nil, err
	}
	if len(proved) > 0 {
		if err := pipeline.SideBySide(
			func() error { return c.writeHeldHourly(ctx, proved, version) },
			func() error { return c.writeHeldLatest(ctx, proved, version) },
		); err != nil {
			return nil, err
		}
		c.held.mu.Lock()
		c.held.written += len(proved)
		c.held.mu.Unlock()
	}
	var rest []pipeline.Touched
	for _, t := range touched {
		if _, ok := proved[t.VariableID]; !ok {
			rest = append(rest, t)
		}
	}
	return rest, nil
}

// proveHeld runs the proof for states (see the top of this file) and
// returns those it holds for.
func (c *Client) proveHeld(ctx context.Context, states map[string]*heldVar, from map[string]int64) (map[string]*heldVar, error) {
	ids := make([]string, 0, len(states))
	for id := range states {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	proved := map[string]*heldVar{}
	// Statements of at most rollupBatch variables: ClickHouse refuses a
	// query text longer than max_query_size (256 KiB by default).
	for len(ids) > 0 {
		n := min(len(ids), rollupBatch)
		if err := c.proveSome(ctx, ids[:n], states, proved, from); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return proved, nil
}

// proveSome runs the proof for the states of ids, adding those it holds
// for to proved. The server counts the rows of each variable and version
// (a few groups per variable); which versions are the state's is checked
// here.
func (c *Client) proveSome(ctx context.Context, ids []string, states, proved map[string]*heldVar, from map[string]int64) error {
	lowest, same := int64(math.MaxInt64), true
	froms := make([]string, len(ids))
	for i, id := range ids {
		lowest = min(lowest, from[id])
		same = same && from[id] == from[ids[0]]
		froms[i] = "toInt64(" + strconv.FormatInt(from[id], 10) + ")"
	}
	in := quotedList(ids)
	q := "SELECT variable_id, version, count() FROM " + c.Table(TableDatapoints) + " PREWHERE " + pointsWhere(in, lowest, 0)
	if !same {
		// Each variable's own F; the PREWHERE on the lowest only limits
		// what is read. A backfill's variables share theirs.
		q += " WHERE ts_ms >= transform(variable_id, [" + in + "], [" + strings.Join(froms, ",") + "], toInt64(0))"
	}
	q += " GROUP BY variable_id, version"
	type tally struct{ all, ours uint64 }
	counts := map[string]*tally{}
	err := c.Retry(ctx, TableDatapoints, func(ctx context.Context) error {
		clear(counts)
		rows, err := c.conn.Query(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var version, n uint64
			if err := rows.Scan(&id, &version, &n); err != nil {
				return err
			}
			t := counts[id]
			if t == nil {
				t = &tally{}
				counts[id] = t
			}
			t.all += n
			if v := states[id]; v != nil && slices.Contains(v.versions, version) {
				t.ours += n
			}
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("count the rows of %d variables in %s: %w", len(ids), c.Table(TableDatapoints), err)
	}
	for id, t := range counts {
		if v := states[id]; v != nil && t.all == v.rows && t.ours == v.rows {
			proved[id] = v
		}
	}
	return nil
}

// writeHeldHourly inserts the hourly rows of the proved states, column by
// column: a row at a time costs clickhouse-go a reflection per value, as
// much as the server spends on the rows.
func (c *Client) writeHeldHourly(ctx context.Context, proved map[string]*heldVar, version uint64) error {
	n := 0
	for _, v := range proved {
		n += len(v.hours)
	}
	var (
		ids, devices                    = make([]string, 0, n), make([]string, 0, n)
		hours                           = make([]time.Time, 0, n)
		counts, versions                = make([]uint64, 0, n), make([]uint64, 0, n)
		sums, mins, maxs, firsts, lasts = make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
		firstTs, lastTs                 = make([]int64, 0, n), make([]int64, 0, n)
	)
	for id, v := range proved {
		for h, a := range v.hours {
			ids, devices, hours = append(ids, id), append(devices, v.device), append(hours, time.UnixMilli(h).UTC())
			counts, versions = append(counts, a.count), append(versions, version)
			sums, mins, maxs = append(sums, a.sum), append(mins, a.min), append(maxs, a.max)
			firsts, lasts = append(firsts, a.firstValue), append(lasts, a.lastValue)
			firstTs, lastTs = append(firstTs, a.firstTs), append(lastTs, a.lastTs)
		}
	}
	cols := [...]any{ids, devices, hours, counts, sums, mins, maxs, firsts, lasts, firstTs, lastTs, versions}
	err := c.Retry(ctx, TableHourly, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.Table(TableHourly)+" ("+hourlyColumns+")")
		if err != nil {
			return err
		}
		defer b.Abort()
		for i, col := range cols {
			if err := b.Column(i).Append(col); err != nil {
				return fmt.Errorf("column %d: %w", i, err)
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("write %d rows of %d variables into %s: %w", n, len(proved), c.Table(TableHourly), err)
	}
	return nil
}

// writeHeldLatest inserts the latest rows of the proved states.
func (c *Client) writeHeldLatest(ctx context.Context, proved map[string]*heldVar, version uint64) error {
	err := c.Retry(ctx, TableLatest, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.Table(TableLatest)+" ("+latestColumns+")")
		if err != nil {
			return err
		}
		defer b.Abort()
		for id, v := range proved {
			l := v.latest
			if err := b.Append(id, v.device, l.deviceLabel, l.variableLabel, l.ts, time.UnixMilli(l.ts).UTC(),
				l.value, l.context, l.lat, l.lng, version); err != nil {
				return err
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("write the latest rows of %d variables into %s: %w", len(proved), c.Table(TableLatest), err)
	}
	return nil
}
