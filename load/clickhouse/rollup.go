package clickhouse

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/pipeline"
)

// The analyst tables, datapoints_latest and datapoints_hourly, are rollups
// of datapoints that stay exact: each row is recomputed, by one INSERT ...
// SELECT over the deduplicated points (`datapoints FINAL` for the hourly
// rows; for the latest ones, the version FINAL keeps, see latestAggregate),
// every time the pipeline hands its variable and hour to Recompute, which
// it does for every range that may hold a point the tables do not reflect,
// before the marks that would stop it being read again (analyst.Range).
// A materialized view cannot do this: it sees every re-read row as a new
// one and would count it twice. Only what the table holds is read, so the
// rows hold the values FINAL keeps, whoever wrote them. This is the one
// way the analyst tables are written (a second, from sums the writer kept
// while inserting, was removed: it saved about 0.6 s of the 5 M-point
// backfill and its sums could differ from FINAL's beyond rounding).
//
// Why a recompute replaces the old row deterministically. A row's version
// is NextVersion taken when the recompute starts, after the points it is
// for were acknowledged, and ClickHouse takes the statement's snapshot of
// datapoints after that. Let the last load that changes a row's aggregate be
// acknowledged at time T. The recompute that follows it takes a version
// above T; every recompute with a greater version took its snapshot later
// still, so it saw that load and every earlier one, and computes the same
// row. Recomputes with smaller versions lose the merge whatever order their
// INSERTs land in, so two racing recomputes (two overlapping cycles, a cycle
// and a backfill, a cycle and `fleetsync rollup`) leave the exact row. This
// relies on the versions of writers on different hosts following their
// clocks, like the versions of datapoints do.
//
// A sync never deletes a point, so a recompute only ever replaces rows;
// the hours a deletion by hand empties are Rebuild's (rebuild.go).
//
// Every statement reaches its tables by pool.table and filters on
// variable_id, which makes it run unchanged when the names are Distributed
// tables sharded by variable_id: every version of a point, and every row
// of its hour, is on the shard the variable hashes to.

// rollupBatch bounds the variables of one recompute statement, so the
// statement stays a few tens of kilobytes.
const rollupBatch = 500

// hourlyStreams is how many hourly recompute statements run at once: one
// per core of a small server. With the latest rows' statement beside them
// a recompute holds hourlyStreams+1 of the pool's connections, which
// Config.MaxOpenConns must leave beside the inserts' (see RollupConns).
const hourlyStreams = 2

// RollupConns is how many connections a recompute holds at once: the pool
// needs this many beside the insert workers' so that a commit's recompute
// never waits for a connection while the loads run.
const RollupConns = hourlyStreams + 1

// hourMs is an hour in POSIX ms.
const hourMs = 3600 * 1000

// earliestMs stands for "from the first point": a range starting below it
// starts there, which keeps the hour arithmetic clear of overflow and is
// before any DateTime.
const earliestMs = -(1 << 62)

// hourStart is the start of ms's hour in ms, rounding down as ClickHouse's
// toStartOfHour does for the ts column (the floor of ts_ms in seconds).
func hourStart(ms int64) int64 {
	ms = max(ms, earliestMs)
	h := ms - ms%hourMs
	if ms%hourMs < 0 {
		h -= hourMs
	}
	return h
}

// AnalystTables keeps the tables analysts query instead of the raw points
// (datapoints_hourly and datapoints_latest): the commit chain's analyst link recomputes them
// through it (Recompute, this file; load/analyst), a rebuild by hand (rebuild.go) and the check and
// repair of verify --rollups (rollup_check.go). Client.AnalystTables
// returns it.
type AnalystTables struct{ *pool }

var _ analyst.Tables = (*AnalystTables)(nil)

// Recompute implements analyst.Tables: the hourly rows of every hour the
// ranges cover, and the latest row of each variable, replaced by aggregates
// over the deduplicated points.
//
// The latest row of a range whose end is a loaded point is read from that
// point's hour on: the variable's newest point is there or later, and a
// backfill of a month reads one hour for it, not the month again.
//
// Variables whose ranges start and end in nearly the same hours share
// statements (see batches): a cycle reads every variable from its mark
// minus the lookback to now, a backfill every variable over its range.
//
// On a cluster the statements run once every replica that is up holds
// every point loaded before the call (readReplicated), so that a
// recompute never writes a newer row from a replica lacking them.
func (c *AnalystTables) Recompute(ctx context.Context, touched []analyst.Range) error {
	if len(touched) == 0 {
		return nil
	}
	c.metrics.rollupVariables.Add(float64(len(touched)))
	return c.cluster().readReplicated(ctx, func(ctx context.Context) error { return c.recompute(ctx, touched) }, TableDatapoints)
}

// recompute is Recompute's statements.
func (c *AnalystTables) recompute(ctx context.Context, touched []analyst.Range) error {
	// The two tables are independent: their statements run side by side,
	// on two of the pool's connections, since each is one thread's work
	// on the server.
	//
	// The hourly rows are most of the work (FINAL merges every point of
	// the ranges, on one thread per statement), so they are cut into
	// hourlyStreams statements of about equal size, run at once: the
	// recompute at the end of a backfill, when the loads no longer use the
	// server's cores, takes half the time on two.
	hourly := func() error {
		bs := batches(touched, (len(touched)+hourlyStreams-1)/hourlyStreams, func(t analyst.Range) window {
			return window{hourStart(t.FromMs), hourStart(t.ToMs) + hourMs}
		})
		errs := pipeline.ForEach(ctx, len(bs), hourlyStreams, func(i int) error {
			b := bs[i]
			if err := c.retry(ctx, TableHourly, func(ctx context.Context) error {
				return c.conn.Exec(ctx, c.hourlySQL(quotedList(b.ids), b.from, b.to, c.nextVersion()))
			}); err != nil {
				return fmt.Errorf("recompute %s for %d variables over [%s, %s): %w", TableHourly, len(b.ids), msUTC(b.from), msUTC(b.to), err)
			}
			return nil
		})
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	latest := func() error {
		for _, b := range batches(touched, rollupBatch, func(t analyst.Range) window {
			if t.Loaded {
				return window{from: hourStart(t.ToMs)}
			}
			return window{from: hourStart(t.FromMs)}
		}) {
			if err := c.retry(ctx, TableLatest, func(ctx context.Context) error {
				return c.conn.Exec(ctx, c.latestSQL(quotedList(b.ids), b.from, c.nextVersion()))
			}); err != nil {
				return fmt.Errorf("recompute %s for %d variables from %s: %w", TableLatest, len(b.ids), msUTC(b.from), err)
			}
		}
		return nil
	}
	return pipeline.SideBySide(hourly, latest)
}

// window is a range of POSIX ms, [from, to); to is 0 for "to the end".
type window struct{ from, to int64 }

// batch is one recompute statement: variables and the window it reads.
type batch struct {
	window
	ids []string
}

// batchSlack is how much longer than its own window a batch may make a
// variable's: the recompute reads that variable's points over the batch's
// window, so a little slack lets the variables of a backfill, whose ranges
// start and end at slightly different times, share one statement, while a
// variable with a late point a week back does not make the others read
// the week.
const batchSlack = 6 * hourMs

// batches groups the touched variables into statements: sorted by the
// window of returns, a variable joins the current batch while the batch's
// window stays within batchSlack of its own and of every member's, up to
// min(limit, rollupBatch) variables. A window with to = 0 is open-ended.
func batches(touched []analyst.Range, limit int, of func(analyst.Range) window) []batch {
	limit = min(max(limit, 1), rollupBatch)
	type item struct {
		w  window
		id string
	}
	items := make([]item, len(touched))
	for i, t := range touched {
		items[i] = item{of(t), t.VariableID}
	}
	sort.Slice(items, func(i, j int) bool {
		a, b := items[i].w, items[j].w
		return a.from < b.from || (a.from == b.from && a.to < b.to)
	})
	var out []batch
	var minLen int64 // the shortest member window of the current batch
	for _, it := range items {
		if n := len(out); n > 0 && len(out[n-1].ids) < limit {
			cur := &out[n-1]
			// Sorted by from: the union starts at cur.from.
			to := max(cur.to, it.w.to)
			if cur.to == 0 || it.w.to == 0 {
				to = 0
			}
			grow := it.w.from - cur.from // an open window grows by its start
			if to != 0 {
				grow = max(to-cur.from-minLen, to-cur.from-(it.w.to-it.w.from))
			}
			if (to == 0) == (cur.to == 0) && grow <= batchSlack {
				cur.to = to
				cur.ids = append(cur.ids, it.id)
				minLen = min(minLen, it.w.to-it.w.from)
				continue
			}
		}
		out = append(out, batch{window: it.w, ids: []string{it.id}})
		minLen = it.w.to - it.w.from
	}
	return out
}

// pointsWhere selects the points of the variables in `in` from from (ms) on,
// and before to when to > 0. Both ts_ms (the sorting key) and ts (the
// partition key) are bounded, so ClickHouse reads only the parts and
// granules concerned. Filtering FINAL on these columns is exact: every
// version of a point has the same variable_id, ts_ms and ts.
func pointsWhere(in string, from, to int64) string {
	return "variable_id IN (" + in + ") AND " + rangeWhere(from, to)
}

// rangeWhere selects the points of every variable from from (ms) on, and
// before to when to > 0 (see pointsWhere).
func rangeWhere(from, to int64) string {
	w := "ts_ms >= " + strconv.FormatInt(from, 10) + " AND ts >= toDateTime(" + strconv.FormatInt(max(from, 0)/1000, 10) + ")"
	if to > 0 {
		w += " AND ts_ms < " + strconv.FormatInt(to, 10) +
			" AND ts <= toDateTime(" + strconv.FormatInt(max(to, 0)/1000, 10) + ")"
	}
	return w
}

// hourlyColumns are datapoints_hourly's columns in the order the recompute
// writes them.
const hourlyColumns = "variable_id, device_id, hour, count, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms, version"

// hourlyAggregates is the SELECT list that computes an hourly row from
// datapoints rows, without the version. first_value and last_value need no
// tie-break: under FINAL a variable has one row per ts_ms.
const hourlyAggregates = "variable_id, argMax(device_id, ts_ms), toStartOfHour(ts) AS hour, count(), " + hourlySum + ", min(value), max(value), " +
	"argMin(value, ts_ms), argMax(value, ts_ms), min(ts_ms), max(ts_ms)"

// hourlySum is the sum column of an hourly row: the same number whatever
// order ClickHouse adds the points in (threads, parts, shards) but for a
// remainder far below rounding, bounded where verify compares (sameSum).
// It is every statement's sum: the recompute, the rebuild (`fleetsync
// rollup`), verify's reference and its repair.
//
// Neither sum nor sumKahan will do on ClickHouse 18.16. On issue 35's hour
// of 40,002 points, the oldest 2^60, the newest -2^60 and the rest 127
// (true sum 5,080,000), sum gives 0 and sumKahan 5,080,064, in either
// order: Kahan's compensation (below ulp(2^60) = 256) is lost when the
// last term cancels the running sum, and 18.16 has no Neumaier variant.
// Worse, a sumKahan state sent between servers breaks the native protocol
// ("Unknown packet" from the shard, which then stops answering), so it
// cannot run over the Distributed tables of a cluster. So each value is
// cut into three parts, decided by the value alone (the same on every
// read):
//   - its integer part when it is below 1e30 in magnitude, added exactly
//     as Decimal128(38, 0) (an hour holds at most 3.6 M points, one per
//     ms, so the sum stays below 3.6e36 < 1.7e38);
//   - its fraction, truncated to 18 decimals, added exactly as
//     Decimal128(38, 18);
//   - the rest, at most about 2.3e-16 in magnitude (the truncation and the
//     Float64 roundings of the fraction's cut), or the whole value when it
//     is 1e30 or more, NaN or ±Inf (which make the sum NaN or ±Inf as a
//     plain sum does), added as Float64.
//
// The two exact sums are converted to Float64 and added in a fixed order:
// the same on every read of the same points. Only the last sum depends on
// the order, by at most γ(n-1)·Σ|rest| for n points, γ(k) = k·u/(1-k·u),
// u = 2^-53, whatever the order or tree of additions (Higham, "Accuracy
// and Stability of Numerical Algorithms", §4.2); one more rounding adds
// it. For integer values, the hour above among them, the rest is 0 and
// the sum the exact one, rounded once.
const hourlySum = "toFloat64(sum(toDecimal128(" + intPart + ", 0))) + toFloat64(sum(" + fracPart + ")) + sum(" + restPart + ")"

// intPart, fracPart and restPart are the parts hourlySum cuts a value in
// (value - intPart is exact: Sterbenz's lemma).
const (
	inRange  = "abs(value) < 1e30"
	intPart  = "if(" + inRange + ", trunc(value), 0)"
	fracPart = "toDecimal128(if(" + inRange + ", value - " + intPart + ", 0), 18)"
	restPart = "value - " + intPart + " - toFloat64(" + fracPart + ")"
)

// hourlySQL recomputes the hourly rows of the variables in `in` over
// [from, to). The window is a PREWHERE: ClickHouse applies it before the
// merge of versions FINAL does, on one thread, which then merges the
// window's rows alone instead of every row of the granules they lie in
// (thousands of other variables' and hours' rows for each variable of an
// incremental cycle). That is exact because the condition is on key
// columns only, which every version of a point shares (pointsWhere).
//
// FINAL is the cheapest exact deduplication 18.16 offers here, though it
// merges on one thread. On `make bench`'s 5 M-point backfill (per
// statement, from system.query_log, two runs each, 2026-11-28) its five
// hourly statements took 2.2-2.3 CPU-s and 155-173 MB; the same rows
// deduplicated by `GROUP BY variable_id, ts_ms` with argMax(..., version),
// which runs on every core, took 7.3-7.6 CPU-s and 880 MB (a hash table
// of one entry per point, where FINAL merges sorted parts: without FINAL,
// which is inexact, 1.5-1.7 CPU-s). Proving an hour free of duplicates
// (count() = uniqExact(ts_ms)) costs as much as FINAL and leaves the other
// hours to it. And argMax cannot break a tie as FINAL does: of two rows of
// a point with one version (an INSERT that holds the point twice) FINAL
// keeps the one inserted last, argMax the one it reads first
// (TestRecomputeCountsOnceTheCopyFinalKeepsOfAPointHeldTwiceByOneInsert).
//
// Where the rest goes (5 M points, one statement, min of three runs,
// 2026-11-28): FINAL's merge about 1.05 CPU-s, the aggregates about 1.3
// (the three-part sum about 0.35 of it: a plain sum(value) would save
// that and lose the order-free exactness above), the INSERT about 0.4.
// Grouping by a fixed-size key (transform() of variable_id to its index
// in the list) instead of the String saved 0.2 CPU-s in a bare GROUP BY
// but nothing measurable in the whole statement, so the key stays plain.
func (c *AnalystTables) hourlySQL(in string, from, to int64, version uint64) string {
	return "INSERT INTO " + c.table(TableHourly) + " (" + hourlyColumns + c.cluster().keyColumn() + ") SELECT " + hourlyAggregates + ", " +
		strconv.FormatUint(version, 10) + c.cluster().keyAggregate() + " FROM " + c.table(TableDatapoints) + " FINAL PREWHERE " + pointsWhere(in, from, to) +
		" GROUP BY variable_id, hour"
}

const latestColumns = "variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng, version"

// latestAggregate picks the newest point of each variable as one tuple:
// argMax over the Nullable lat and lng alone would skip the points without
// a position and return an older point's.
//
// It reads datapoints without FINAL, ordering the rows by (ts_ms,
// version): that is the row FINAL keeps, since ReplacingMergeTree(version)
// keeps the greatest version of each key and every version of a point
// shares its variable_id and ts_ms. FINAL would merge every column of every
// granule it reads, on one thread, before the WHERE drops all but the last
// hour; with a variable's points spread over a month, that granule holds
// thousands of the variable's older points, so the merge cost a FINAL read
// of nearly every point a backfill loaded. Without FINAL the window's
// condition is moved to PREWHERE and the argMax sees a few rows per
// variable. Versions of different INSERTs are distinct nanosecond clocks;
// only one INSERT holding a point twice (a request retried after part of
// its response was streamed) gives two rows of a point the same version;
// FINAL keeps the one inserted last and argMax may pick the other, but
// both came from the source moments apart.
//
// The tuple holds no Nullable: lat and lng travel as a NULL flag and a
// number. ClickHouse 18.16 merges argMax states of a tuple with Nullable
// members from the shards of a Distributed table as 0 instead of NULL.
const latestAggregate = "variable_id, argMax(tuple(device_id, device_label, variable_label, ts_ms, ts, value, context, " +
	"isNull(lat), ifNull(lat, 0), isNull(lng), ifNull(lng, 0)), tuple(ts_ms, version)) AS p"

const latestFields = "variable_id, p.1, p.2, p.3, p.4, p.5, p.6, p.7, if(p.8, NULL, p.9), if(p.10, NULL, p.11)"

// latestSQL recomputes the latest rows from the points at or after from:
// the newest point of a variable is among them whenever it has a point
// there, and Recompute only asks for variables that do.
func (c *AnalystTables) latestSQL(in string, from int64, version uint64) string {
	return "INSERT INTO " + c.table(TableLatest) + " (" + latestColumns + c.cluster().keyColumn() + ") SELECT " + latestFields + ", " +
		strconv.FormatUint(version, 10) + c.cluster().placedKey() + " FROM (SELECT " + latestAggregate + c.cluster().keyAggregate() + " FROM " + c.table(TableDatapoints) +
		" WHERE " + pointsWhere(in, from, 0) + " GROUP BY variable_id)"
}

// msUTC formats a POSIX-ms timestamp for errors.
func msUTC(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// quotedList is ids as a list of ClickHouse string literals.
func quotedList(ids []string) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\'')
		for j := 0; j < len(id); j++ {
			if ch := id[j]; ch == '\'' || ch == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(id[j])
		}
		b.WriteByte('\'')
	}
	return b.String()
}
