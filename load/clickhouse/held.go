package clickhouse

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Proven rollups. A backfill reads every point of a variable back under
// FINAL to recompute its hours (rollup.go), the analyst tables' main cost.
// The rows it would read are, most of the time, exactly the rows this
// process has just inserted, which it saw on their way. So the writer also
// folds every row it sends into a record per variable: its hourly
// aggregates, its newest row, and how many rows each INSERT (each version)
// held. Recompute then writes a variable's rows from its record when one
// cheap query, without FINAL, proves that the table holds exactly those
// rows from the record's first hour on; otherwise it recomputes as before.
//
// Why the proof is exact. Let W be the window from the start of the hour
// of the handed range's start, or of the record's first row if earlier,
// open-ended: every row of the record is in W. The query counts the
// variable's rows in W by version; the record passes when the counts are
// those the record holds, for every version and no other, and every
// version was acknowledged (its INSERT's Commit returned). Two invariants
// make that a proof:
//   - a record holds every row its versions sent for its variable: a
//     version whose rows a record may have missed (its record was taken,
//     or not made for want of memory, while the INSERT was open) is
//     tainted until the INSERT ends, and a record meeting it is spoiled;
//   - an INSERT is never sent twice under its version (Write keeps no
//     record of an INSERT it had to retry), so the table holds each of its
//     rows at most once.
// So for every version v the table's rows of v in W are a subset of the
// record's rows of v, and as many: the same. No other row is in W. And
// the record's rows are pairwise distinct points: every run (the rows of
// one variable in a chunk) is strictly monotone in time and no two runs'
// time ranges overlap. FINAL over W is then the record's rows, each once.
// (A cut frame's rows read again overlap: those variables are recomputed.
// Writing the other hours from the record and recomputing only the
// overlaps was measured: it kept more records alive and the results-first
// backfill's peak RSS passed 256 MiB.)
// The rows written take a version drawn before the query, as a recompute
// does (see rollup.go): a load acknowledged after the query's snapshot is
// followed by its writer's recompute with a greater version.
//
// The sums are added in the order the rows came, ClickHouse's in its
// own: they agree to rounding (verify compares them so), not bit for bit.

// maxHeldBytes bounds the memory of the records. A variable beyond it
// gets no record, and is recomputed from FINAL.
const maxHeldBytes = 16 << 20

// maxHeldValue bounds the values a record adds up: 3.6 M of them add up
// to less than the largest float64, in any order.
const maxHeldValue = 1e300

// maxRuns bounds the time ranges a record keeps to prove its rows
// distinct; a variable whose rows come in more runs than that (rows of
// many variables interleaved, or many small frames) is recomputed.
const maxRuns = 64

// cellBytes and recordBytes are what held counts against maxHeldBytes
// for a cell and a record (its fields and map entry, less its strings).
const (
	cellBytes   = 56
	recordBytes = 320
)

// cell is the aggregates of a variable's points in one hour, what
// datapoints_hourly holds, in 56 bytes: a backfill holds hundreds of
// thousands of them.
type cell struct {
	hour  int32  // hours since 1970; the points are inside DateTime's range
	count uint32 // an hour holds at most 3.6 M points, one per ms
	// firstMs and lastMs are the first and last point's ms in the hour.
	firstMs, lastMs uint32
	sum, min, max   float64
	first, last     float64 // the values at firstMs and lastMs
}

// newCell is the cell of one point, at ms.
func newCell(ms int64, v float64) cell {
	in := uint32(ms % hourMs)
	return cell{hour: int32(ms / hourMs), count: 1, firstMs: in, lastMs: in, sum: v, min: v, max: v, first: v, last: v}
}

// startMs is the start of the cell's hour, POSIX ms.
func (c *cell) startMs() int64 { return int64(c.hour) * hourMs }

// add folds one more point of the hour, at ms, into c.
func (c *cell) add(ms int64, v float64) {
	in := uint32(ms % hourMs)
	c.count++
	c.sum += v
	c.min, c.max = min(c.min, v), max(c.max, v)
	if in < c.firstMs {
		c.firstMs, c.first = in, v
	}
	if in > c.lastMs {
		c.lastMs, c.last = in, v
	}
}

// merge folds o, of other points in the same hour, into c.
func (c *cell) merge(o *cell) {
	c.count += o.count
	c.sum += o.sum
	c.min, c.max = min(c.min, o.min), max(c.max, o.max)
	if o.firstMs < c.firstMs {
		c.firstMs, c.first = o.firstMs, o.first
	}
	if o.lastMs > c.lastMs {
		c.lastMs, c.last = o.lastMs, o.last
	}
}

// span is a closed range of timestamps, POSIX ms.
type span struct{ from, to int64 }

// versionRows is how many rows of a variable one INSERT sent.
type versionRows struct {
	version uint64
	rows    int64
	// ended says the INSERT ended (no more rows come), acked that it was
	// acknowledged.
	acked, ended bool
}

// record is what one variable's rows sent since its last Recompute add up
// to. spoiled means it can prove nothing: its variable is recomputed.
type record struct {
	spoiled  bool
	device   string
	key      uint64 // shard_key, on a cluster
	versions []versionRows
	runs     []span
	// cells holds one cell per run and hour, unsorted; cells merges them.
	cells  []cell
	latest pipeline.Row // the newest row, strings copied out of the chunk
	bytes  int
}

// held is the Client's records, by variable. It folds nothing until on
// (Client.Rollups): without the hook nothing would take the records.
type held struct {
	on    atomic.Bool
	mu    sync.Mutex
	vars  map[string]*record
	bytes int
	// tainted are the versions of open INSERTs whose rows a record may
	// have missed.
	tainted map[uint64]bool
	// minRows is the fewest rows a record must hold to be proven, 0 for
	// minProvenRows (tests lower it).
	minRows int64
}

// minProvenRows is the fewest rows a record is proven with. The count
// reads each variable's granules of datapoints (8,192 rows) from its
// first hour on, as the recompute does under FINAL; for a variable that
// loaded a few points, an incremental cycle's, the recompute costs little
// more than the count, which besides fails whenever earlier points share
// that hour. So those are recomputed directly.
const minProvenRows = 1024

// rows is how many rows the record counts, over every version.
func (r *record) rows() int64 {
	var n int64
	for _, v := range r.versions {
		n += v.rows
	}
	return n
}

// fold adds the rows of ch, sent under version, to their variables'
// records, and appends to recs each record that saw version for the first
// time, for ack. On a cluster place keys the rows (nil on one server).
func (h *held) fold(ch *pipeline.Batch, version uint64, place *placement, recs []*record) []*record {
	if !h.on.Load() {
		return recs
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.vars == nil {
		h.vars, h.tainted = map[string]*record{}, map[uint64]bool{}
	}
	for i, n := 0, ch.Len(); i < n; {
		j := i + 1
		for j < n && ch.VariableID[j] == ch.VariableID[i] {
			j++
		}
		if r := h.foldRun(ch, i, j, version, place); r != nil {
			recs = append(recs, r)
		}
		i = j
	}
	return recs
}

// foldRun folds rows [i, j) of ch, all of one variable, and returns its
// record when the run is the first of version in it.
func (h *held) foldRun(ch *pipeline.Batch, i, j int, version uint64, place *placement) *record {
	id := ch.VariableID[i]
	r := h.vars[id]
	if r == nil {
		if h.bytes+recordBytes > maxHeldBytes {
			h.tainted[version] = true
			return nil
		}
		r = &record{device: ch.DeviceID[i], bytes: recordBytes}
		if place != nil {
			r.key = place.key(id)
		}
		h.vars[id] = r
		h.bytes += r.bytes
	}
	var first *record
	versionsCap, runsCap := cap(r.versions), cap(r.runs)
	k := slices.IndexFunc(r.versions, func(v versionRows) bool { return v.version == version })
	if k < 0 {
		k = len(r.versions)
		r.versions = append(r.versions, versionRows{version: version})
		first = r
	}
	// A spoiled record keeps its versions, so that taking it while one of
	// them is open taints it (take).
	if r.spoiled {
		return first
	}
	if h.tainted[version] {
		h.spoil(r)
		return first
	}
	r.versions[k].rows += int64(j - i)
	if place != nil && place.key(id) != r.key {
		h.spoil(r)
		return first
	}
	ts, vals := ch.TsMs[i:j], ch.Value[i:j]
	capBefore := cap(r.cells)
	// Room for the cells the run can make (the hours it spans, at most
	// one per row), no more: append's doubling would leave up to half of
	// a long record's cells unused.
	if span := (max(ts[0], ts[len(ts)-1]) - min(ts[0], ts[len(ts)-1])) / hourMs; span >= 0 {
		r.cells = slices.Grow(r.cells, int(min(span+2, int64(len(ts)))))
	}
	before := len(r.cells)
	newest := i
	up := len(ts) < 2 || ts[1] > ts[0]
	for k, ms := range ts {
		v := vals[k]
		// As ClickHouse only for values whose sums over an hour (at most
		// 3.6 M points) cannot overflow in any order, other than -0 (the
		// order in which min meets 0 and -0 would matter), and only inside
		// DateTime's range, where toStartOfHour(ts) is hourStart.
		if math.IsNaN(v) || math.Abs(v) > maxHeldValue || (v == 0 && math.Signbit(v)) ||
			ms < 0 || ms >= (1<<32)*1000 || ch.DeviceID[i+k] != r.device ||
			(k > 0 && (ms > ts[k-1]) != up) || (k > 0 && ms == ts[k-1]) {
			h.spoil(r)
			return first
		}
		if ms > ch.TsMs[newest] {
			newest = i + k
		}
		if n := len(r.cells); n > before && r.cells[n-1].hour == int32(ms/hourMs) {
			r.cells[n-1].add(ms, v)
			continue
		}
		r.cells = append(r.cells, newCell(ms, v))
	}
	ok := r.addRun(span{min(ts[0], ts[len(ts)-1]), max(ts[0], ts[len(ts)-1])})
	// What the slices' capacity grew by is what they cost.
	grew := (cap(r.cells)-capBefore)*cellBytes + (cap(r.versions)-versionsCap)*24 + (cap(r.runs)-runsCap)*16
	if !ok || h.bytes+grew > maxHeldBytes {
		h.spoil(r)
		return first
	}
	if len(r.latest.VariableID) == 0 || ch.TsMs[newest] > r.latest.TsMs {
		grew += len(ch.DeviceLabel[newest]) + len(ch.VariableLabel[newest]) + len(ch.Context[newest]) - r.latestBytes()
		r.latest = pipeline.Row{
			VariableID: id, DeviceID: r.device,
			DeviceLabel: strings.Clone(ch.DeviceLabel[newest]), VariableLabel: strings.Clone(ch.VariableLabel[newest]),
			TsMs: ch.TsMs[newest], Value: ch.Value[newest], Context: strings.Clone(ch.Context[newest]),
			Lat: ch.Lat[newest], Lng: ch.Lng[newest], HasLat: ch.HasLat[newest], HasLng: ch.HasLng[newest],
		}
	}
	r.bytes += grew
	h.bytes += grew
	return first
}

// latestBytes is the size of the strings the record's newest row holds.
func (r *record) latestBytes() int {
	return len(r.latest.DeviceLabel) + len(r.latest.VariableLabel) + len(r.latest.Context)
}

// addRun records the time range of a run, false when it meets an earlier
// one (a point may then be held twice, as when a cut frame's rows are read
// again) or the record has maxRuns. The ranges are kept sorted and
// pairwise disjoint, so a variable's frames may come in any order.
func (r *record) addRun(s span) bool {
	i, _ := slices.BinarySearchFunc(r.runs, s.from, func(o span, from int64) int { return cmp.Compare(o.from, from) })
	if (i > 0 && r.runs[i-1].to >= s.from) || (i < len(r.runs) && r.runs[i].from <= s.to) || len(r.runs) == maxRuns {
		return false
	}
	r.runs = slices.Insert(r.runs, i, s)
	return true
}

// spoil drops what r holds but its versions; it stays in the map so that
// later runs of its variable are not folded for nothing.
func (h *held) spoil(r *record) {
	h.bytes -= r.bytes - recordBytes
	*r = record{spoiled: true, bytes: recordBytes, versions: r.versions}
}

// end is told that the INSERT of version ended (no more rows of it
// come), and whether it was acknowledged, with recs, the records fold
// returned for it.
func (h *held) end(version uint64, acked bool, recs []*record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.tainted, version)
	for _, r := range recs {
		for i := range r.versions {
			if r.versions[i].version == version {
				r.versions[i].acked, r.versions[i].ended = acked, true
			}
		}
	}
}

// take removes the records of ids and returns those that may prove their
// rows: not spoiled, every INSERT acknowledged.
func (h *held) take(ids []string) map[string]*record {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]*record{}
	for _, id := range ids {
		r, ok := h.vars[id]
		if !ok {
			continue
		}
		delete(h.vars, id)
		h.bytes -= r.bytes
		open := false
		for _, v := range r.versions {
			if !v.acked {
				open = true
				if !v.ended {
					// Its INSERT may go on with rows of id for a record
					// started anew, which would lack those sent so far.
					h.tainted[v.version] = true
				}
			}
		}
		if !r.spoiled && !open {
			out[id] = r
		}
	}
	return out
}

// hours is the record's cells merged by hour, in time order.
func (r *record) hours() []cell {
	cs := r.cells
	slices.SortFunc(cs, func(a, b cell) int { return cmp.Compare(a.hour, b.hour) })
	out := cs[:0]
	for _, c := range cs {
		if n := len(out); n > 0 && out[n-1].hour == c.hour {
			out[n-1].merge(&c)
			continue
		}
		out = append(out, c)
	}
	return out
}

// proves reports whether counts, the table's rows of the record's
// variable in the window by version, are exactly the record's.
func (r *record) proves(counts map[uint64]uint64) bool {
	if len(counts) != len(r.versions) {
		return false
	}
	for _, v := range r.versions {
		if counts[v.version] != uint64(v.rows) {
			return false
		}
	}
	return true
}

// writeProven proves the records of the variables in touched against the
// table and writes the analyst rows of those proven; it returns the
// touched entries left for the recompute.
func (c *Client) writeProven(ctx context.Context, touched []pipeline.Touched) ([]pipeline.Touched, error) {
	ids := make([]string, len(touched))
	for i, t := range touched {
		ids[i] = t.VariableID
	}
	recs := c.held.take(ids)
	least := cmp.Or(c.held.minRows, minProvenRows)
	var candidates, rest []pipeline.Touched
	for _, t := range touched {
		if r := recs[t.VariableID]; r != nil && t.Loaded && r.rows() >= least {
			candidates = append(candidates, t)
			continue
		}
		rest = append(rest, t)
	}
	byID := map[string]pipeline.Touched{}
	for _, t := range candidates {
		byID[t.VariableID] = t
	}
	for _, b := range batches(candidates, rollupBatch, func(t pipeline.Touched) window {
		// From the record's first row if the range starts later, so that
		// every row the record would write is counted.
		return window{from: hourStart(min(t.FromMs, recs[t.VariableID].runs[0].from))}
	}) {
		version := c.NextVersion()
		counts, err := c.versionCounts(ctx, b.ids, b.from)
		if err != nil {
			return nil, fmt.Errorf("count the rows of %d variables by version: %w", len(b.ids), err)
		}
		var proven []*record
		for _, id := range b.ids {
			r := recs[id]
			if !r.proves(counts[id]) {
				rest = append(rest, byID[id])
				continue
			}
			proven = append(proven, r)
		}
		if err := c.writeRecords(ctx, proven, version); err != nil {
			return nil, err
		}
		c.metrics.rollupProven.Add(float64(len(proven)))
	}
	return rest, nil
}

// versionCounts counts the rows of the variables ids from from (ms) on, by
// variable and version, without FINAL.
func (c *Client) versionCounts(ctx context.Context, ids []string, from int64) (map[string]map[uint64]uint64, error) {
	out := map[string]map[uint64]uint64{}
	err := c.Retry(ctx, TableDatapoints, func(ctx context.Context) error {
		clear(out)
		rows, err := c.conn.Query(ctx, "SELECT variable_id, version, count() FROM "+c.Table(TableDatapoints)+
			" PREWHERE "+pointsWhere(quotedList(ids), from, 0)+" GROUP BY variable_id, version")
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
			if out[id] == nil {
				out[id] = map[uint64]uint64{}
			}
			out[id][version] = n
		}
		return rows.Err()
	})
	return out, err
}

// writeRecords inserts the hourly and latest rows of the proven records
// under version, column by column as the points are.
func (c *Client) writeRecords(ctx context.Context, recs []*record, version uint64) error {
	if len(recs) == 0 {
		return nil
	}
	for _, r := range recs {
		r.cells = r.hours()
	}
	if err := c.insertBlocks(ctx, TableHourly, hourlyColumns, func(send func(cols ...any) error) error {
		return hourlyBlocks(recs, version, c.keyColumn() != "", send)
	}); err != nil {
		return fmt.Errorf("write %s of %d variables: %w", TableHourly, len(recs), err)
	}
	// One row a variable: the row-wise InsertRows does.
	keyed := c.keyColumn() != ""
	return c.InsertRows(ctx, TableLatest, latestColumns+c.keyColumn(), len(recs), func(i int) []any {
		r := recs[i]
		p := &r.latest
		var lat, lng *float64
		if p.HasLat {
			lat = &p.Lat
		}
		if p.HasLng {
			lng = &p.Lng
		}
		row := []any{p.VariableID, p.DeviceID, p.DeviceLabel, p.VariableLabel, p.TsMs, floorSeconds(p.TsMs), p.Value, p.Context, lat, lng, version}
		if keyed {
			row = append(row, r.key)
		}
		return row
	})
}

// blockRows bounds the rows of one block of writeRecords' INSERTs, so
// that a backfill's hundreds of thousands of hours are not all in memory
// twice, as columns and as the driver's buffers.
const blockRows = 16384

// hourlyBlocks hands send the datapoints_hourly columns of recs' cells,
// blockRows rows at a time (with the shard_key when keyed).
func hourlyBlocks(recs []*record, version uint64, keyed bool, send func(cols ...any) error) error {
	var (
		ids, devices                  []string
		hours, firstTs, lastTs        []int64
		counts, versions, keys        []uint64
		sums, mins, maxs, firsts, lst []float64
	)
	flush := func() error {
		cols := []any{ids, devices, hours, counts, sums, mins, maxs, firsts, lst, firstTs, lastTs, versions}
		if keyed {
			cols = append(cols, keys)
		}
		err := send(cols...)
		ids, devices, hours, counts, sums, mins, maxs = ids[:0], devices[:0], hours[:0], counts[:0], sums[:0], mins[:0], maxs[:0]
		firsts, lst, firstTs, lastTs, versions, keys = firsts[:0], lst[:0], firstTs[:0], lastTs[:0], versions[:0], keys[:0]
		return err
	}
	for _, r := range recs {
		for _, h := range r.cells {
			ids, devices = append(ids, r.latest.VariableID), append(devices, r.device)
			hours, counts = append(hours, h.startMs()/1000), append(counts, uint64(h.count))
			sums, mins, maxs = append(sums, h.sum), append(mins, h.min), append(maxs, h.max)
			firsts, lst = append(firsts, h.first), append(lst, h.last)
			firstTs, lastTs = append(firstTs, h.startMs()+int64(h.firstMs)), append(lastTs, h.startMs()+int64(h.lastMs))
			versions, keys = append(versions, version), append(keys, r.key)
			if len(ids) == blockRows {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return flush()
}

// insertBlocks runs one INSERT into table of the columns in list (and the
// shard_key on a cluster), whose blocks fill hands to send, a slice per
// column; the whole INSERT is retried.
func (c *Client) insertBlocks(ctx context.Context, table, list string, fill func(send func(cols ...any) error) error) error {
	return c.Retry(ctx, table, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.Table(table)+" ("+list+c.keyColumn()+")")
		if err != nil {
			return err
		}
		defer b.Abort()
		if err := fill(func(cols ...any) error {
			for i, col := range cols {
				if err := b.Column(i).Append(col); err != nil {
					return fmt.Errorf("column %d: %w", i, err)
				}
			}
			return b.Flush()
		}); err != nil {
			return err
		}
		return b.Send()
	})
}

// floorSeconds is ms in whole seconds, rounded down: a negative ms must
// not round up into the next second.
func floorSeconds(ms int64) int64 {
	s := ms / 1000
	if ms%1000 < 0 {
		s--
	}
	return s
}
