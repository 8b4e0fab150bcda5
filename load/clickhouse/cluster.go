package clickhouse

import (
	"fmt"
	"slices"
	"strings"
)

// localSuffix names a cluster's local (Replicated) table: datapoints_local
// under the Distributed datapoints.
const localSuffix = "_local"

// everywhereShard stands for {shard} in the ZooKeeper path of a table kept
// whole on every node: all nodes of the cluster are replicas of one set.
const everywhereShard = "all"

// sharded reports whether a table is split among a cluster's shards. By
// rule the tables whose rows belong to a variable (sorted by variable_id
// first: datapoints and the tables derived from it) are, as they grow with
// the points; every other table (devices, variables, groups, the lease, the
// schema version) is small, and is kept whole on every node, a Replicated
// table under the contract's name, so that the README's joins and IN
// subqueries read it locally on each shard (a sharded right-hand side would
// need distributed_product_mode, or GLOBAL, on every analyst's query).
func sharded(t tableDef) bool {
	if t.everywhere {
		return false
	}
	return firstSortColumn(t) == "variable_id"
}

// firstSortColumn is the first column of a table's ORDER BY, "" when it has
// none.
func firstSortColumn(t tableDef) string {
	_, order, ok := strings.Cut(t.engine, "ORDER BY ")
	if !ok {
		return ""
	}
	order = strings.TrimSpace(order)
	if cut := strings.Index(order, " SETTINGS "); cut >= 0 {
		order = order[:cut]
	}
	order = strings.TrimSuffix(strings.TrimPrefix(order, "("), ")")
	first, _, _ := strings.Cut(order, ",")
	if first = strings.TrimSpace(first); first == "tuple()" {
		return ""
	}
	return first
}

// clustered reports whether the client writes a cluster (Config.Cluster).
func (c *pool) clustered() bool { return c.cfg.Cluster != "" }

// cluster is what the ports need of a cluster, over their one pool: the ON
// CLUSTER clause and the local tables' names (this file), where a
// variable's rows go (placement.go), and reads that see every acknowledged
// point (consistency.go). On one server its methods reduce to what one
// server needs, mostly nothing. The schema's own cluster work (the tables'
// layout over the shards) is Schema's, below.
type cluster struct{ *pool }

// cluster returns the cluster side of c.
func (c *pool) cluster() cluster { return cluster{c} }

// onCluster is the ON CLUSTER clause of every DDL statement, empty for one
// server.
func (c cluster) onCluster() string {
	if !c.clustered() {
		return ""
	}
	return " ON CLUSTER `" + c.cfg.Cluster + "`"
}

// localTable is the back-quoted name of a cluster's local table of name.
func (c cluster) localTable(name string) string {
	return "`" + c.cfg.Database + "`.`" + c.cfg.TablePrefix + name + localSuffix + "`"
}

// Replica names, the second argument of a Replicated engine. ClickHouse
// asks {replica} to be unique among the replicas of one shard only, and
// many clusters name them r1, r2 in every shard. A sharded table's
// replicas are one shard's ({shard} is in its ZooKeeper path), so
// {replica} names them; a table kept whole on every node has every node of
// the cluster as a replica of one path, so its replica name holds both
// macros, unique whatever the macros are, as ClickHouse's rule requires
// (18.16 expands macros in both arguments). Tables of that kind created
// before schema version 5 keep the name they have ({replica} alone, which
// was unique in the whole cluster, or they could not have been created):
// a replica's name matters only to ZooKeeper, and only when it is created.
const (
	shardReplica = "{replica}"
	wholeReplica = "{shard}-{replica}"
)

// replicatedEngine turns a table's single-server engine into its
// replicated form by rule, so that every table definition, present or
// added later, gets one: "ReplacingMergeTree(version) ORDER BY id" becomes
// "ReplicatedReplacingMergeTree('<path>/<db>/<table>', '<replica>',
// version) ORDER BY id". The ZooKeeper path holds the {shard} macro
// (config checks it), so each shard's replicas share a path and shards do
// not.
func replicatedEngine(engine, zkPath, database, table, replica string) (string, error) {
	end := strings.IndexAny(engine, "( ")
	if end < 0 {
		end = len(engine)
	}
	name, rest := engine[:end], engine[end:]
	if !strings.HasSuffix(name, "MergeTree") {
		return "", fmt.Errorf("table %s: engine %s has no replicated form; only *MergeTree tables can live on a cluster", table, name)
	}
	args := ""
	if strings.HasPrefix(rest, "(") {
		closing := strings.IndexByte(rest, ')')
		if closing < 0 {
			return "", fmt.Errorf("table %s: engine %q lacks a closing parenthesis", table, engine)
		}
		if a := strings.TrimSpace(rest[1:closing]); a != "" {
			args = ", " + a
		}
		rest = rest[closing+1:]
	}
	path := strings.TrimRight(zkPath, "/") + "/" + database + "/" + table
	return fmt.Sprintf("Replicated%s('%s', '%s'%s)%s", name, path, replica, args, rest), nil
}

// shardingKey is the Distributed table's sharding expression: the
// shard_key column (placement.go), which every row of a variable carries
// alike, so that every row of one sorting key (what ReplacingMergeTree
// collapses) lands on one shard and FINAL through the Distributed table
// stays exact, before and after the cluster grows.
func shardingKey(t tableDef) (string, error) {
	if t.shardBy != "" {
		return t.shardBy, nil
	}
	if firstSortColumn(t) != "variable_id" {
		return "", fmt.Errorf("table %s: engine %q is not sorted by variable_id first; only such tables are sharded", t.name, t.engine)
	}
	return shardKeyColumn, nil
}

// legacyShardingKey is what a sharded table of a cluster laid out before
// schema version 5 was sharded by; the shard_key column added to it
// defaults to the same placement (see migrateClusterTable).
const legacyShardingKey = "sipHash64(variable_id)"

// clusterColumns are t's columns on a cluster: a sharded table has the
// shard_key column last, whose DEFAULT is the hash placement over the
// first layout migrate recorded (total weight w0). Rows fleetsync writes
// always give the key; the DEFAULT keys the rows of parts written before
// the column existed (laid out by sipHash64(variable_id) over that same
// layout) and rows inserted by hand without it.
func clusterColumns(t tableDef, w0 uint64) []column {
	if !sharded(t) {
		return t.columns
	}
	return append(slices.Clip(t.columns), column{name: shardKeyColumn, typ: "UInt64", dflt: fmt.Sprintf("%s %% %d", legacyShardingKey, w0)})
}

// clusterSettings are the session settings of a cluster's connections.
//
// insert_distributed_sync: an INSERT into a Distributed table returns only
// once one replica of every shard it touches has written its rows, so an
// acknowledged batch is on the shards (not in a node's send queue) before
// its marks move. The Distributed table picks a healthy replica per shard
// and fails over to another when one is down.
//
// Reads through a Distributed table may go to a replica that lags the one
// written to. For marks that means an older mark and a re-read, never a
// skipped point (marks only grow: see state); the lease reads its claim
// back until replication shows it (see state.ClickHouse.Acquire). The
// reads that must see every loaded point (the analyst tables' recompute,
// rebuild and check, verify's counts) wait for the replicas instead
// (readReplicated, consistency.go), whichever replica ClickHouse then
// reads, so the profile's load_balancing does not matter to fleetsync; it
// could not be set here anyway: clickhouse-go sends 18.16 numeric
// settings only ("query setting load_balancing has unsupported data
// type").
func clusterSettings(cfg Config) map[string]any {
	if cfg.Cluster == "" {
		return nil
	}
	return map[string]any{"insert_distributed_sync": 1}
}
