//go:build cluster

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

// clusterWorld is a world whose warehouse is a database on the local
// cluster, synced by shards that each read their own token.
type clusterWorld struct {
	*world
	cl *chserver.Cluster
	// handler, when set, sees every API request before the simulator.
	handler func(w http.ResponseWriter, r *http.Request, next http.Handler)
}

// shardToken is the API token of shard i: each shard its own.
func shardToken(i int) string { return fmt.Sprintf("shard-%d-token-s3cr3t", i) }

func newClusterWorld(t *testing.T, opts fleetsim.Options) *clusterWorld {
	t.Helper()
	return newClusterWorldOn(t, chtest.Cluster(t), opts)
}

// newClusterWorldOn is newClusterWorld on the cluster cl (one a test
// builds with its own naming, or grows).
func newClusterWorldOn(t *testing.T, cl *chserver.Cluster, opts fleetsim.Options) *clusterWorld {
	t.Helper()
	if opts.Seed == 0 {
		opts.Seed = 11
	}
	if opts.Devices == 0 {
		opts.Devices, opts.Variables, opts.Points, opts.Span = 4, 4, 300, 30*24*time.Hour
	}
	opts.Tokens = []string{testToken}
	for i := range 4 {
		opts.Tokens = append(opts.Tokens, shardToken(i))
	}
	sim, err := fleetsim.New(opts)
	if err != nil {
		t.Fatalf("fleetsim: %v", err)
	}
	t.Cleanup(sim.Close)
	cw := &clusterWorld{cl: cl, world: &world{t: t, sim: sim, chAddr: cl.Nodes[0][0].Addr(), db: chtest.ClusterDatabase(t, cl),
		dir: t.TempDir(), retention: 730 * 24 * time.Hour, margin: time.Hour}}
	cw.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cw.handler != nil {
			cw.handler(w, r, sim)
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(cw.http.Close)
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(cw.dir, fmt.Sprintf("token-%d", i)), []byte(shardToken(i)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{cw.chAddr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cw.conn = conn
	return cw
}

// config writes the configuration of shard index of count (index < 0
// leaves sync.shard_index out, for JOB_COMPLETION_INDEX) and returns its
// path.
func (cw *clusterWorld) config(index, count int, extra string) string {
	cw.t.Helper()
	return shardConfig(cw.t, cw.dir, cw.http.URL, cw.cl, cw.db, index, count, extra)
}

// shardConfig writes, in dir, the configuration of shard index of count
// syncing the source at url into database db of cluster cl, each shard
// reading dir/token-<index>.
func shardConfig(tb testing.TB, dir, url string, cl *chserver.Cluster, db string, index, count int, extra string) string {
	tb.Helper()
	shard := fmt.Sprintf("shard_count: %d\n", count)
	if index >= 0 {
		shard += fmt.Sprintf("shard_index: %d\n", index)
	}
	addrs := make([]string, 0, 4)
	for _, a := range cl.Addrs() {
		addrs = append(addrs, fmt.Sprintf("%q", a))
	}
	path := filepath.Join(dir, fmt.Sprintf("fleetsync-%d-of-%d.yaml", index, count))
	cfg := fmt.Sprintf(`source:
  base_url: %s
  token_file: %s
  retention: %dh
  retry_max_elapsed: 30s
  initial_requests_per_second: 0
sync:
  lookback: 1h
  batch_age: 200ms
  lease_ttl: 30s
%s
clickhouse:
  addr: [%s]
  database: %s
  cluster: %s
  retry_max_elapsed: 60s
metrics:
  listen: "127.0.0.1:0"
log:
  format: json
  level: info
`, url, filepath.Join(dir, "token-{shard}"), 730*24, indent(shard+extra), strings.Join(addrs, ", "), db, cl.Name())
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// shardRun is one in-process `fleetsync sync` of a shard.
type shardRun struct {
	code        int
	out, stderr string
}

// syncShards runs `fleetsync sync` for every config at once, in process,
// each with environ, and returns their results in order.
func (cw *clusterWorld) syncShards(environ []string, cfgs ...string) []shardRun {
	cw.t.Helper()
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
	for i, r := range res {
		for tok := range 4 {
			if strings.Contains(r.out+r.stderr, shardToken(tok)) {
				cw.t.Fatalf("shard run %d: a token appears in fleetsync's output", i)
			}
		}
	}
	return res
}

// mustSync runs the shards at once and fails the test unless all exit 0.
func (cw *clusterWorld) mustSync(cfgs ...string) []shardRun {
	cw.t.Helper()
	res := cw.syncShards(nil, cfgs...)
	for i, r := range res {
		if r.code != 0 {
			cw.t.Fatalf("shard run %d (%s) exited %d; its log ends:\n%s", i, filepath.Base(cfgs[i]), r.code, lastLines(r.stderr, 15))
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
func shardLogLines(t *testing.T, stderr string) []logLine {
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
func cycleSpan(t *testing.T, stderr string) (start, end time.Time, sum logLine) {
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

// localRows is the raw row count of this world's datapoints_local on node n.
func (cw *clusterWorld) localRows(n *chserver.Server) (uint64, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{n.Addr()}, DialTimeout: 2 * time.Second})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var c uint64
	err = conn.QueryRow(context.Background(), "SELECT count() FROM `"+cw.db+"`.datapoints_local").Scan(&c)
	return c, err
}

// distributedRows is the raw row count through the Distributed table.
func (cw *clusterWorld) distributedRows() uint64 {
	var c uint64
	if err := cw.conn.QueryRow(context.Background(), "SELECT count() FROM `"+cw.db+"`.datapoints").Scan(&c); err != nil {
		return 0
	}
	return c
}

// settle waits until the replicas of every shard hold the same datapoints
// rows (replication is asynchronous: an INSERT is acknowledged by one
// replica), so that a read through the Distributed table, which may go to
// either replica, sees everything loaded.
func (cw *clusterWorld) settle() {
	cw.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for s, shard := range cw.cl.Nodes {
		for {
			counts := make([]uint64, len(shard))
			var err error
			for r, n := range shard {
				if counts[r], err = cw.localRows(n); err != nil {
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
				cw.t.Fatalf("shard %d: replicas hold %v datapoints rows after 2m (%v)", s, counts, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// singleServerConfig writes, beside the shard configuration cfg, the same
// sync into a fresh database of the one server srv, unsharded, and returns
// its path and the database: the README's queries must answer there as on
// the cluster.
func (cw *clusterWorld) singleServerConfig(cfg string, srv *chserver.Server) (path, db string) {
	cw.t.Helper()
	db = chtest.NewDatabase(cw.t, srv)
	path = filepath.Join(cw.dir, "single.yaml")
	text, err := os.ReadFile(cfg)
	if err != nil {
		cw.t.Fatal(err)
	}
	s := string(text)
	s = s[:strings.Index(s, "clickhouse:")] + fmt.Sprintf("clickhouse:\n  addr: [%q]\n  database: %s\nmetrics:\n  listen: \"127.0.0.1:0\"\nlog:\n  format: json\n", srv.Addr(), db)
	s = strings.Replace(s, "  shard_count: 2\n  shard_index: 0\n", "", 1)
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		cw.t.Fatal(err)
	}
	return path, db
}
