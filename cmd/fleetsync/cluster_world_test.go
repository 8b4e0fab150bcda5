//go:build cluster

package main

// What the cluster tests add to the harness (harness_test.go, whose
// newClusterWorld puts a world's database on a cluster): a configuration
// per sync shard, shards run at once, their logs, the replicas of a shard
// waited for and read one by one, and the checks only a cluster needs.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	fsch "github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

// shardConfig writes the configuration of shard index of count (index < 0
// leaves sync.shard_index out, for JOB_COMPLETION_INDEX), with more sync
// lines, and returns its path. Each shard reads its own token.
func (w *world) shardConfig(index, count int, sync string) string {
	w.t.Helper()
	shard := fmt.Sprintf("shard_count: %d", count)
	if index >= 0 {
		shard += fmt.Sprintf("\nshard_index: %d", index)
	}
	return w.writeConfig(filepath.Join(w.dir, fmt.Sprintf("fleetsync-%d-of-%d.yaml", index, count)), configLines{
		source: "token_file: " + filepath.Join(w.dir, "token-{shard}"),
		sync:   shard + "\n" + sync,
	})
}

// shardRun is one in-process `fleetsync sync` of a shard.
type shardRun struct {
	code        int
	out, stderr string
}

// syncShards runs `fleetsync sync` for every config at once, in process,
// each with environ, and returns their results in order.
func (w *world) syncShards(environ []string, cfgs ...string) []shardRun {
	w.t.Helper()
	res := make([]shardRun, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errb strings.Builder
			res[i].code = run(context.Background(), []string{"sync", "--config", cfg}, &out, &errb, environ)
			res[i].out, res[i].stderr = out.String(), errb.String()
		}()
	}
	wg.Wait()
	for _, r := range res {
		w.checkNoSecret(r.out + r.stderr)
	}
	return res
}

// mustSync runs the shards at once and fails the test unless all exit 0.
func (w *world) mustSync(cfgs ...string) []shardRun {
	w.t.Helper()
	res := w.syncShards(nil, cfgs...)
	for i, r := range res {
		if r.code != 0 {
			w.t.Fatalf("shard run %d (%s) exited %d; its log ends:\n%s", i, filepath.Base(cfgs[i]), r.code, lastLines(r.stderr, 15))
		}
	}
	return res
}

// logLine is the part of a JSON log line the cluster tests read.
type logLine struct {
	TS         string  `json:"ts"`
	Msg        string  `json:"msg"`
	ShardIndex *int    `json:"shard_index"`
	Read       float64 `json:"read"`
	Points     float64 `json:"points"`
}

// shardLogLines parses a run's JSON log.
func shardLogLines(t testing.TB, stderr string) []logLine {
	t.Helper()
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg != "" {
			out = append(out, l)
		}
	}
	return out
}

// cycleSpan is when a run's cycle started (planned, under its lease) and
// finished, from its log, and the summary line.
func cycleSpan(t testing.TB, stderr string) (start, end time.Time, sum logLine) {
	t.Helper()
	for _, l := range shardLogLines(t, stderr) {
		ts, err := time.Parse("2006-01-02T15:04:05.000Z0700", l.TS)
		if err != nil {
			continue
		}
		switch l.Msg {
		case "cycle planned":
			start = ts
		case "cycle finished":
			end, sum = ts, l
		}
	}
	if start.IsZero() || end.IsZero() {
		t.Fatalf("no cycle planned/finished lines in the log:\n%s", lastLines(stderr, 10))
	}
	return start, end, sum
}

// nodeConn opens one connection to node n alone, to read or change what
// that server holds rather than what the cluster does; the caller closes
// it.
func nodeConn(n *chserver.Server) (driver.Conn, error) {
	return clickhouse.Open(&clickhouse.Options{Addr: []string{n.Addr()}, DialTimeout: 2 * time.Second, MaxOpenConns: 1})
}

// localRows is the raw row count of this world's datapoints_local on node n.
func (w *world) localRows(n *chserver.Server) (uint64, error) {
	conn, err := nodeConn(n)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var c uint64
	err = conn.QueryRow(context.Background(), "SELECT count() FROM `"+w.db+"`.datapoints_local").Scan(&c)
	return c, err
}

// onNode runs a statement on one node of the cluster.
func (w *world) onNode(n *chserver.Server, q string) {
	w.t.Helper()
	conn, err := nodeConn(n)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Exec(context.Background(), q); err != nil {
		w.t.Fatalf("%s on %s: %v", q, n.Addr(), err)
	}
}

// nodeStrings runs a query of one String column on node n alone.
func (w *world) nodeStrings(n *chserver.Server, q string, args ...any) []string {
	w.t.Helper()
	conn, err := nodeConn(n)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close()
	return chtest.Strings(w.t, conn, q, args...)
}

// macro is the value of one of node n's macros.
func (w *world) macro(n *chserver.Server, name string) string {
	w.t.Helper()
	v := w.nodeStrings(n, "SELECT substitution FROM system.macros WHERE macro = ?", name)
	if len(v) != 1 {
		w.t.Fatalf("macro %s of %s: %v", name, n.Addr(), v)
	}
	return v[0]
}

// settle waits until the replicas of every shard hold the same datapoints
// rows (replication is asynchronous: an INSERT is acknowledged by one
// replica), so that a read through the Distributed table, which may go to
// either replica, sees everything loaded.
func (w *world) settle() {
	w.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for s, shard := range w.cl.Nodes {
		for {
			counts := make([]uint64, len(shard))
			var err error
			for r, n := range shard {
				if counts[r], err = w.localRows(n); err != nil {
					break
				}
			}
			same := err == nil
			for _, c := range counts {
				same = same && c == counts[0]
			}
			if same {
				break
			}
			if time.Now().After(deadline) {
				w.t.Fatalf("shard %d: replicas hold %v datapoints rows after 2m (%v)", s, counts, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// checkExact waits until every replica that is up has fetched what its
// shard holds, then checks the points (checkOracle), the analyst tables
// (every hourly and latest row against the same aggregates over
// datapoints FINAL) and the marks: none moved back from prev or
// passed a point not loaded, and each variable's reaches its newest
// point. It returns the marks.
func (w *world) checkExact(prev map[string]int64) map[string]int64 {
	w.t.Helper()
	for _, shard := range w.cl.Nodes {
		for _, n := range shard {
			if n.PID() == 0 {
				continue
			}
			for _, table := range w.nodeStrings(n, "SELECT name FROM system.tables WHERE database = ? AND engine LIKE 'Replicated%'", w.db) {
				w.onNode(n, "SYSTEM SYNC REPLICA `"+w.db+"`.`"+table+"`")
			}
		}
	}
	w.checkOracle()
	newest := map[string]int64{}
	oldest := time.Now().UnixMilli()
	for k := range w.expected() {
		newest[k.variable] = max(newest[k.variable], k.ts)
		oldest = min(oldest, k.ts)
	}
	// The analyst tables, every hourly row and every latest row, against
	// the same aggregates over datapoints FINAL (what verify checks:
	// rolluptest's reference, one FINAL read of every column ordered by
	// key, fails on 18.16's Distributed tables with "Cannot find column
	// version in source stream").
	c, err := fsch.Open(context.Background(), fsch.Config{Addr: w.cl.Addrs(), Database: w.db, Cluster: w.cl.Name()}, nil, prometheus.NewRegistry())
	if err != nil {
		w.t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.AnalystTables().CheckRollups(context.Background(), oldest, time.Now().UnixMilli())
	if err != nil {
		w.t.Fatalf("check the analyst tables: %v", err)
	}
	if rep.Latest != len(newest) || rep.Hours == 0 || len(rep.Diffs) > 0 {
		w.t.Fatalf("analyst tables: %d hourly and %d latest rows compared (want %d latest), %d differ: %+v", rep.Hours, rep.Latest, len(newest), len(rep.Diffs), rep.Diffs[:min(len(rep.Diffs), 8)])
	}
	w.t.Logf("analyst tables exact: %d hourly and %d latest rows", rep.Hours, rep.Latest)
	marks := w.checkMarksCovered(prev)
	for id, ts := range newest {
		if marks[id] < ts {
			w.t.Errorf("mark of %s is %d, before its newest point %d", id, marks[id], ts)
		}
	}
	return marks
}

// variablesByShard is, per shard of the cluster, the variables its local
// datapoints table holds (read on its first replica, after settle); a
// variable on two shards fails the test.
func (w *world) variablesByShard() []map[string]bool {
	w.t.Helper()
	out := make([]map[string]bool, len(w.cl.Nodes))
	where := map[string]int{}
	for s, shard := range w.cl.Nodes {
		out[s] = map[string]bool{}
		for _, id := range w.nodeStrings(shard[0], "SELECT DISTINCT variable_id FROM `"+w.db+"`.datapoints_local") {
			if prev, ok := where[id]; ok {
				w.t.Errorf("variable %s has rows on shards %d and %d", id, prev+1, s+1)
			}
			where[id] = s
			out[s][id] = true
		}
	}
	return out
}

// checkAnalystTables checks datapoints_hourly and datapoints_latest
// through the Distributed tables against the same aggregates over
// datapoints FINAL: one row per variable and hour with points, one per
// variable, no duplicate. (rolluptest.Check reads datapoints FINAL with
// ORDER BY, which 18.16 refuses through a Distributed table unless the
// version column is selected: "Cannot find column version".)
func (w *world) checkAnalystTables() {
	w.t.Helper()
	q := func(sql string) []string {
		rows := queryRows(w.t, w.conn, strings.ReplaceAll(sql, "DB.", "`"+w.db+"`."))
		sort.Strings(rows)
		return rows
	}
	for _, c := range []struct{ name, got, want string }{
		{"hourly",
			"SELECT variable_id, device_id, hour, count, round(sum, 6), min, max, first_value, last_value, first_ts_ms, last_ts_ms FROM DB.datapoints_hourly FINAL WHERE count > 0",
			"SELECT variable_id, argMax(device_id, ts_ms), toStartOfHour(ts) AS hour, count(), round(sum(value), 6), min(value), max(value), argMin(value, ts_ms), argMax(value, ts_ms), min(ts_ms), max(ts_ms) FROM DB.datapoints FINAL GROUP BY variable_id, hour"},
		{"latest",
			"SELECT variable_id, device_id, ts_ms, value, context FROM DB.datapoints_latest FINAL",
			"SELECT variable_id, argMax(device_id, ts_ms), max(ts_ms), argMax(value, ts_ms), argMax(context, ts_ms) FROM DB.datapoints FINAL GROUP BY variable_id"},
	} {
		got, want := q(c.got), q(c.want)
		if !reflect.DeepEqual(got, want) {
			var diff []string
			for i := 0; i < max(len(got), len(want)) && len(diff) < 4; i++ {
				var g, wt string
				if i < len(got) {
					g = got[i]
				}
				if i < len(want) {
					wt = want[i]
				}
				if g != wt {
					diff = append(diff, fmt.Sprintf("got %q want %q", g, wt))
				}
			}
			w.t.Errorf("datapoints_%s FINAL: %d rows, want %d; first differences: %s", c.name, len(got), len(want), strings.Join(diff, "; "))
		}
	}
}

// oneServer is the world's sync into a fresh database of one server,
// unsharded: the README's queries must answer there as on the cluster.
type oneServer struct {
	srv     *chserver.Server
	cfg, db string
}

// oneServerSync writes the configuration of the same sync into a fresh
// database of srv, unsharded.
func (w *world) oneServerSync(srv *chserver.Server) oneServer {
	w.t.Helper()
	one := oneServer{srv: srv, db: chtest.NewDatabase(w.t, srv)}
	one.cfg = w.writeConfig(filepath.Join(w.dir, "single.yaml"), configLines{
		source:     "token_file: " + filepath.Join(w.dir, "token-{shard}"),
		clickhouse: fmt.Sprintf("addr: [%q]\ndatabase: %s\ncluster: \"\"", srv.Addr(), one.db),
	})
	return one
}

// checkReadmeQueries runs the README's SQL examples on the cluster and on
// one, synced from the same fleet, and fails where they differ. A
// device_group_member_changes row's at is the second a sync's snapshot saw
// the change: the two syncs run side by side and may straddle a second, so
// each must lie within [from, to] and the rest must agree.
func (w *world) checkReadmeQueries(one oneServer, from, to time.Time) {
	w.t.Helper()
	conn := openConn(w.t, one.srv)
	for _, q := range readmeQueries(w.t, "DB") {
		onCluster := queryRows(w.t, w.conn, strings.ReplaceAll(q, "`DB`", "`"+w.db+"`"))
		onOne := queryRows(w.t, conn, strings.ReplaceAll(q, "`DB`", "`"+one.db+"`"))
		if strings.Contains(q, "device_group_member_changes") {
			onCluster, onOne = withoutSyncClock(w.t, onCluster, from, to), withoutSyncClock(w.t, onOne, from, to)
		}
		if strings.Contains(q, "sync_watermark") {
			// Each deployment's watermark is its own syncs' (their floors,
			// their marks' times): the query must run on both, not agree.
			continue
		}
		if !reflect.DeepEqual(onCluster, onOne) {
			w.t.Errorf("README query differs between the cluster (%d rows) and one server (%d rows):\n%s\nfirst rows: %v\nvs %v",
				len(onCluster), len(onOne), q, onCluster[:min(3, len(onCluster))], onOne[:min(3, len(onOne))])
		}
		if len(onOne) == 0 && !strings.Contains(q, "'temperature'") {
			w.t.Logf("README query returns no rows on this fleet:\n%s", q)
		}
	}
}

// readmeQueries are the SQL examples of README.md, on database db.
func readmeQueries(t testing.TB, db string) []string {
	t.Helper()
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, block := range strings.Split(string(text), "```sql")[1:] {
		q, _, _ := strings.Cut(block, "```")
		q = strings.TrimSpace(strings.ReplaceAll(q, "fleet.", "`"+db+"`."))
		q = strings.TrimSuffix(q, ";")
		if i := strings.Index(q, "\nFORMAT "); i >= 0 {
			q = q[:i]
		}
		out = append(out, q)
	}
	if len(out) < 5 {
		t.Fatalf("found only %d SQL examples in README.md", len(out))
	}
	return out
}

// queryRows runs q and renders its rows as text, floats to 9 significant
// digits (a distributed avg sums in another order).
func queryRows(t testing.TB, conn driver.Conn, q string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%v\nquery:\n%s", err, q)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals := make([]any, len(rows.ColumnTypes()))
		for i, ct := range rows.ColumnTypes() {
			vals[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, v := range vals {
			switch x := reflect.ValueOf(v).Elem().Interface().(type) {
			case float64:
				fmt.Fprintf(&b, "%.9g|", x)
			case *float64:
				if x == nil {
					b.WriteString("NULL|")
				} else {
					fmt.Fprintf(&b, "%.9g|", *x)
				}
			default:
				fmt.Fprintf(&b, "%v|", x)
			}
		}
		out = append(out, b.String())
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// withoutSyncClock checks that the first column of every row (rendered by
// queryRows) is a time within [from, to] and returns the rows without it,
// sorted: what is left of a query whose first column is the sync's clock.
func withoutSyncClock(t testing.TB, rows []string, from, to time.Time) []string {
	t.Helper()
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		at, rest, ok := strings.Cut(r, "|")
		if !ok {
			t.Fatalf("row %q has one column", r)
		}
		ts, err := time.Parse("2006-01-02 15:04:05 -0700 MST", at)
		if err != nil {
			t.Fatalf("row %q: first column is not a time: %v", r, err)
		}
		if ts.Before(from) || ts.After(to) {
			t.Errorf("row %q: at %s is not within the syncs (%s to %s)", r, ts, from, to)
		}
		out = append(out, rest)
	}
	sort.Strings(out)
	return out
}
