package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"
)

// Reads that see every acknowledged point on a cluster (issue 24, case 5).
//
// The rollups are recomputed from datapoints FINAL right after a load is
// acknowledged, and their rows replace older ones by version: a recompute
// that reads a replica lacking an acknowledged part writes a newer row
// without its points, and that row wins. An acknowledged part is on the
// replica that took the INSERT until its siblings fetch it; which replica a
// Distributed statement reads is ClickHouse's choice, and that choice moves
// when replicas die and return (the writer dies before its sibling fetched
// the part; a replica returns before it fetched what the others took
// meanwhile). So readReplicated runs each such statement between two looks
// at ZooKeeper, where every replica of a shard keeps its log pointer and
// its queue, and the shard keeps the log of the parts written to it:
//
//  1. Before: for every replica, the parts it has yet to fetch are the
//     fetches in its queue and in the log past its pointer. The statement
//     waits until every replica that is up (is_active) has pulled the log
//     as it was and done those fetches. A replica that took an INSERT
//     holds its part; every other one fetches it: so each replica that is
//     up then holds every part written before 1, acknowledged or not.
//     Merges are not waited for: a replica holds the rows of a merged part
//     in the parts it merges.
//  2. The statement runs, with fallback_to_stale_replicas_for_distributed_queries
//     off. It reads a replica that was up at 1, and then held those parts
//     (a replica loses parts only through a restart); or one that came up
//     since. A replica that restarted is not up by 1's measure until it has
//     taken its ZooKeeper session back and pulled its queue (18.16 took 20
//     seconds in the tests), and until then it reports an endless
//     replication delay: ClickHouse reads another replica, or, with the
//     fallback off, fails rather than read it.
//  3. After: a replica whose is_active node is not the one of 1 came up
//     since (every start and every new ZooKeeper session creates it anew);
//     then the statement runs again, from 1, with a newer version that
//     replaces whatever it wrote.
//
// A part that only a replica that is down holds cannot reach the others
// until that replica is back: the rollups cannot be exact without it, so
// the read fails at once (LaggingReplicaError, retryable, naming the shard,
// the part, the replica that holds it and what to do), the commit's marks
// are not written, and the next sync reads those windows again; syncs
// succeed again by themselves once the replica is back and its sibling
// fetched the part. A part some replica that is up holds is waited for,
// up to a bound. The profile's load_balancing does not matter to any of
// this. Left out: a replica cut from ZooKeeper that keeps serving queries
// is not up by 1's measure, so it is not waited for, and ClickHouse may
// read it for up to max_replica_delay_for_distributed_queries.
//
// What ClickHouse 18.16 does with such a part (ReplicatedMergeTreePartCheckThread):
// a replica that cannot fetch a part from any replica that is up looks for
// it among all replicas in ZooKeeper, up or down, and keeps the fetch in its
// queue while any of them lists it; only when none does, it drops the fetch
// and logs "Part ... is lost forever". So a replica whose disk is lost
// must be restored under its name (ClickHouse's recovery after complete
// data loss: the table definitions copied from a sibling and the
// force_restore_data flag); it then removes the parts it lacks from its
// own list in ZooKeeper and the part is given up as lost everywhere. Its
// points must then be loaded again (fleetsync backfill over the part's
// month): the marks of an earlier commit may already lie past them.
//
// Quorum inserts (insert_quorum=2, with select_sequential_consistency on
// the reads) give the same guarantee from the writing end, and were tried
// first: on 18.16 they failed 5 of the 6 cluster tests of cmd/fleetsync,
// since 18.16 runs one quorum insert per shard at a time and refuses the
// others (UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE) while the loaders' INSERTs
// overlap; and with a replica down no load succeeds at all.

// readReplicated runs read, statements that read tables (Table* constants
// of sharded tables) through their Distributed tables on a cluster, so that
// they see every row acknowledged before the call (see above); read must be
// safe to run again, with new versions. It waits up to half of
// InsertTimeout for replicas that are up to catch up (longer than
// ZooKeeper's default session timeout, 30s: a replica that was killed
// stays up in ZooKeeper that long, with the fetches it had to do), then
// returns a *LaggingReplicaError; it returns one at once when a part is
// held by no replica that is up. On one server it runs read once, as it
// is, at no cost.
func (c cluster) readReplicated(ctx context.Context, read func(ctx context.Context) error, tables ...string) error {
	if !c.clustered() {
		return read(ctx)
	}
	var shards []string
	names := map[string]string{}
	for _, name := range tables {
		paths, err := c.shardPaths(ctx, name, names)
		if err != nil {
			return err
		}
		shards = append(shards, paths...)
	}
	const rereads = 3
	for attempt := 0; ; attempt++ {
		before, err := c.awaitCaughtUp(ctx, shards, max(c.cfg.InsertTimeout/2, time.Second))
		if lag, ok := err.(*LaggingReplicaError); ok {
			lag.ShardName = names[lag.Shard]
		}
		if err != nil {
			return err
		}
		if err := read(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"fallback_to_stale_replicas_for_distributed_queries": 0}))); err != nil {
			return err
		}
		after, err := c.replicaStates(ctx, shards)
		if err != nil {
			return fmt.Errorf("look at the replicas after a read that must see every loaded point: %w", err)
		}
		restarted := restartedReplicas(before, after)
		if len(restarted) == 0 {
			return nil
		}
		if attempt == rereads {
			return &LaggingReplicaError{Restarted: restarted}
		}
		c.log.Info("replicas started while a read that must see every loaded point ran; running it again", zap.Strings("replicas", restarted))
	}
}

// LaggingReplicaError is a read that did not run because a replica of a
// shard that is up lacks a part its shard holds: held only by replicas
// that are down (Unreachable), or not fetched within the wait; or a read
// that ran more than once while replicas kept restarting. It is
// retryable: it ends once every replica that is up holds the part, which
// for a part only a replica that is down holds means once that one is
// back. Its text is one line naming the shard, the part, the replicas
// and what to do.
type LaggingReplicaError struct {
	// Shard is the ZooKeeper path of the shard's replicated table,
	// ShardName its {shard} macro.
	Shard, ShardName string
	// Replica lacks Part, which Writer wrote.
	Replica, Part, Writer string
	// Unreachable: no replica that is up holds Part.
	Unreachable bool
	// Waited is how long the replicas were given to catch up.
	Waited time.Duration
	// Restarted lists the replicas that kept restarting, when that was
	// the cause.
	Restarted []string
}

func (e *LaggingReplicaError) Error() string {
	if len(e.Restarted) > 0 {
		return fmt.Sprintf("replicas %s restarted during every attempt to read every loaded point; the marks stay where they were, try again once they stay up",
			strings.Join(e.Restarted, ", "))
	}
	table := e.Shard[strings.LastIndexByte(e.Shard, '/')+1:]
	if e.Unreachable {
		month := ""
		if len(e.Part) >= 6 {
			if t, err := time.Parse("200601", e.Part[:6]); err == nil {
				month = " --from " + t.Format(time.RFC3339) + " --to " + t.AddDate(0, 1, 0).Format(time.RFC3339)
			}
		}
		return fmt.Sprintf("shard %s: part %s of %s is held only by replica %s, which is down, and replica %s lacks it, so no read sees every loaded point (the analyst tables' recompute, verify) and the marks stay where they were; "+
			"start %s and sync again (nothing is lost meanwhile); if its disk is lost, restore it under the same name (ClickHouse's recovery after complete data loss: the same macros, the table definitions copied from %s and the force_restore_data flag), "+
			"which makes ClickHouse give the part up as lost, then run fleetsync backfill%s",
			e.ShardName, e.Part, table, e.Writer, e.Replica, e.Writer, e.Replica, month)
	}
	return fmt.Sprintf("shard %s: replica %s has not fetched part %s of %s from %s within %s, so no read sees every loaded point yet (the analyst tables' recompute, verify) and the marks stay where they were; "+
		"system.replication_queue on %s says why, and the next sync tries again",
		e.ShardName, e.Replica, e.Part, table, e.Writer, e.Waited.Round(time.Second), e.Replica)
}

// Retryable implements pipeline.RetryableError.
func (e *LaggingReplicaError) Retryable() bool { return true }

// replica is what ZooKeeper says of one replica of a shard.
type replica struct {
	shard, name string
	// active: the replica is up (its is_active node exists); since is
	// the ZooKeeper transaction that created that node, new at every start
	// and every new session.
	active bool
	since  int64
	// pointer is the index of the next log entry it is to pull.
	pointer int64
	// fetches are the parts its queue is to fetch.
	fetches []fetch
}

// fetch is a part to fetch, and the replica that wrote it.
type fetch struct{ part, source string }

// shardPaths lists the ZooKeeper paths of the local table of name, one per
// shard: the path of migrateClusterTable with the server's macros
// substituted, and {shard} matched against the nodes ZooKeeper has. It
// adds each path's {shard} value to names.
func (c cluster) shardPaths(ctx context.Context, name string, names map[string]string) ([]string, error) {
	tmpl := strings.TrimRight(c.cfg.ZookeeperPath, "/") + "/" + c.cfg.Database + "/" + c.cfg.TablePrefix + name + localSuffix
	rows, err := c.conn.Query(ctx, "SELECT macro, substitution FROM system.macros")
	if err != nil {
		return nil, fmt.Errorf("read the server's macros: %w", err)
	}
	for rows.Next() {
		var m, v string
		if err := rows.Scan(&m, &v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the server's macros: %w", err)
		}
		if m != "shard" {
			tmpl = strings.ReplaceAll(tmpl, "{"+m+"}", v)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the server's macros: %w", err)
	}
	parts := strings.Split(strings.TrimPrefix(tmpl, "/"), "/")
	at := slices.IndexFunc(parts, func(p string) bool { return strings.Contains(p, "{shard}") })
	if at < 0 || strings.Contains(strings.ReplaceAll(tmpl, "{shard}", ""), "{") {
		return nil, fmt.Errorf("zookeeper path %s: want {shard} and macros the server defines", tmpl)
	}
	pre, post, _ := strings.Cut(parts[at], "{shard}")
	// Walk down from the parent of {shard}, one level a query, keeping the
	// nodes that have the next part of the path.
	level := []string{"/" + strings.Join(parts[:at], "/")}
	shardOf := map[string]string{}
	for i := at; i < len(parts); i++ {
		children, err := c.zkChildren(ctx, level)
		if err != nil {
			return nil, err
		}
		var next []string
		for _, parent := range level {
			for _, ch := range children[parent] {
				if i == at && len(ch.name) > len(pre)+len(post) && strings.HasPrefix(ch.name, pre) && strings.HasSuffix(ch.name, post) ||
					i > at && ch.name == parts[i] {
					p := strings.TrimSuffix(parent, "/") + "/" + ch.name
					if i == at {
						shardOf[p] = ch.name[len(pre) : len(ch.name)-len(post)]
					} else {
						shardOf[p] = shardOf[parent]
					}
					next = append(next, p)
				}
			}
		}
		level = next
	}
	if len(level) == 0 {
		return nil, fmt.Errorf("no replicated table %s in ZooKeeper (%s); run fleetsync migrate", c.cfg.TablePrefix+name+localSuffix, tmpl)
	}
	for _, p := range level {
		names[p] = shardOf[p]
	}
	return level, nil
}

// replicaStates reads every replica of shards from ZooKeeper: whether it
// is up (and since when), its log pointer, then its queue, in that
// order, so that no fetch it pulls meanwhile is missed by both.
func (c cluster) replicaStates(ctx context.Context, shards []string) ([]replica, error) {
	names, err := c.zkChildren(ctx, mapPaths(shards, "/replicas"))
	if err != nil {
		return nil, err
	}
	var out []replica
	var paths []string
	for _, s := range shards {
		for _, n := range names[s+"/replicas"] {
			out = append(out, replica{shard: s, name: n.name})
			paths = append(paths, s+"/replicas/"+n.name)
		}
	}
	nodes, err := c.zkChildren(ctx, paths)
	if err != nil {
		return nil, err
	}
	for i, p := range paths {
		for _, n := range nodes[p] {
			switch n.name {
			case "is_active":
				out[i].active, out[i].since = true, n.created
			case "log_pointer":
				// Empty until the replica first pulls the log.
				out[i].pointer, _ = strconv.ParseInt(strings.TrimSpace(n.value), 10, 64)
			}
		}
	}
	queues, err := c.zkChildren(ctx, mapPaths(paths, "/queue"))
	if err != nil {
		return nil, err
	}
	for i, p := range paths {
		for _, n := range queues[p+"/queue"] {
			if f, ok := parseFetch(n.value); ok {
				out[i].fetches = append(out[i].fetches, f)
			}
		}
	}
	return out, nil
}

// shardLogs reads the log of every shard: the fetches it asks of the
// replicas, by log index.
func (c cluster) shardLogs(ctx context.Context, shards []string) (map[string]map[int64]fetch, error) {
	logs, err := c.zkChildren(ctx, mapPaths(shards, "/log"))
	if err != nil {
		return nil, err
	}
	entries := map[string]map[int64]fetch{}
	for _, s := range shards {
		entries[s] = map[int64]fetch{}
		for _, n := range logs[s+"/log"] {
			i, err := strconv.ParseInt(strings.TrimPrefix(n.name, "log-"), 10, 64)
			if f, ok := parseFetch(n.value); ok && err == nil {
				entries[s][i] = f
			}
		}
	}
	return entries, nil
}

// parseFetch reads a replication log or queue entry, and returns the part
// it fetches when it is a fetch ("get", the entry of an INSERT).
func parseFetch(entry string) (fetch, bool) {
	var f fetch
	lines := strings.Split(entry, "\n")
	for i, l := range lines {
		if v, ok := strings.CutPrefix(l, "source replica: "); ok {
			f.source = v
		}
		if l == "get" && i+1 < len(lines) {
			f.part = lines[i+1]
			return f, f.part != ""
		}
	}
	return f, false
}

// awaitCaughtUp waits until every replica of shards that is up has done
// the fetches it had to do at the first look (see the top of this file),
// looking again with a growing pause, for at most wait; a part no replica
// that is up holds ends the wait at once. It returns the replicas as they
// were when they had caught up.
func (c cluster) awaitCaughtUp(ctx context.Context, shards []string, wait time.Duration) ([]replica, error) {
	deadline := time.Now().Add(wait)
	first, err := c.replicaStates(ctx, shards)
	if err != nil {
		return nil, fmt.Errorf("look at the replicas before a read that must see every loaded point: %w", err)
	}
	logs, err := c.shardLogs(ctx, shards)
	if err != nil {
		return nil, fmt.Errorf("look at the replicas before a read that must see every loaded point: %w", err)
	}
	// due: the parts each replica (shard/name) was to fetch, by name, with
	// the index of their log entry when it had not pulled it (else -1).
	// Its own parts it holds.
	due := map[string]map[string]dueFetch{}
	for _, r := range first {
		d := map[string]dueFetch{}
		for _, f := range r.fetches {
			if f.source != r.name {
				d[f.part] = dueFetch{fetch: f, index: -1}
			}
		}
		for i, f := range logs[r.shard] {
			if i >= r.pointer && f.source != r.name {
				d[f.part] = dueFetch{fetch: f, index: i}
			}
		}
		due[r.shard+"/"+r.name] = d
	}
	pause := 50 * time.Millisecond
	now := first
	for {
		lag := lagging(now, due)
		if lag == nil {
			return now, nil
		}
		lag.Waited = wait
		if lag.Unreachable || time.Now().Add(pause).After(deadline) {
			return nil, lag
		}
		c.log.Debug("waiting for a replica before a read that must see every loaded point", zap.String("replica", lag.Replica), zap.String("part", lag.Part))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (waiting for replicas: %w)", ctx.Err(), lag)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
		if now, err = c.replicaStates(ctx, shards); err != nil {
			return nil, fmt.Errorf("look at the replicas before a read that must see every loaded point: %w", err)
		}
	}
}

// dueFetch is a part a replica was to fetch at the first look, and the
// index of its log entry when the replica had yet to pull it, else -1.
type dueFetch struct {
	fetch
	index int64
}

// lagging returns a replica of now that is up and was there at the first
// look (due), and has not yet fetched a part that was due: one its queue
// still holds, or whose log entry it has yet to pull; nil when there is
// none. A replica that was not there at the first look is left to the look
// after the read. A part that no replica that is up holds is preferred,
// marked Unreachable: waiting cannot bring it. The replicas that hold a
// part are its writer and every replica that was there at the first look
// and lacks it no longer.
func lagging(now []replica, due map[string]map[string]dueFetch) *LaggingReplicaError {
	lacks := func(r replica, part string) bool {
		d, ok := due[r.shard+"/"+r.name]
		if !ok {
			return true // not there at the first look: unknown
		}
		f, ok := d[part]
		if !ok {
			return false
		}
		return slices.ContainsFunc(r.fetches, func(q fetch) bool { return q.part == part }) || f.index >= r.pointer
	}
	var found *LaggingReplicaError
	for _, r := range now {
		d, ok := due[r.shard+"/"+r.name]
		if !r.active || !ok {
			continue
		}
		parts := make([]string, 0, len(d))
		for p := range d {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		for _, p := range parts {
			if !lacks(r, p) {
				continue
			}
			source := d[p].source
			held := false
			for _, o := range now {
				if o.shard == r.shard && o.name != r.name && o.active && (o.name == source || !lacks(o, p)) {
					held = true
				}
			}
			lag := &LaggingReplicaError{Shard: r.shard, Replica: r.name, Part: p, Writer: source, Unreachable: !held}
			if !held {
				return lag
			}
			if found == nil {
				found = lag
			}
		}
	}
	return found
}

// restartedReplicas names the replicas of after that are up under another
// is_active node than in before: started, or back from a lost session,
// since.
func restartedReplicas(before, after []replica) []string {
	was := map[string]int64{}
	for _, r := range before {
		if r.active {
			was[r.shard+"/"+r.name] = r.since
		}
	}
	var out []string
	for _, r := range after {
		if r.active && was[r.shard+"/"+r.name] != r.since {
			out = append(out, r.name)
		}
	}
	return out
}

// zkNode is one child of a ZooKeeper node.
type zkNode struct {
	name, value string
	// created is the transaction that created the node (czxid).
	created int64
}

// zkChildren lists the children of every node of paths, with their values,
// in one query (18.16's system.zookeeper takes one path a SELECT).
func (c cluster) zkChildren(ctx context.Context, paths []string) (map[string][]zkNode, error) {
	out := map[string][]zkNode{}
	if len(paths) == 0 {
		return out, nil
	}
	selects := make([]string, len(paths))
	for i, p := range paths {
		selects[i] = "SELECT path, name, value, toInt64(czxid) FROM system.zookeeper WHERE path = " + quotedList([]string{p})
	}
	rows, err := c.conn.Query(ctx, strings.Join(selects, " UNION ALL "))
	if err != nil {
		return nil, fmt.Errorf("read ZooKeeper %s: %w", strings.Join(paths, ", "), err)
	}
	defer rows.Close()
	for rows.Next() {
		var path string
		var n zkNode
		if err := rows.Scan(&path, &n.name, &n.value, &n.created); err != nil {
			return nil, fmt.Errorf("read ZooKeeper: %w", err)
		}
		out[path] = append(out[path], n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ZooKeeper: %w", err)
	}
	return out, nil
}

// mapPaths appends suffix to every path.
func mapPaths(paths []string, suffix string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = p + suffix
	}
	return out
}
