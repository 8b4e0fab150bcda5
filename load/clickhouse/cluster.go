package clickhouse

import (
	"context"
	"fmt"
	"go.uber.org/zap"
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
func (c *Client) clustered() bool { return c.cfg.Cluster != "" }

// onCluster is the ON CLUSTER clause of every DDL statement, empty for one
// server.
func (c *Client) onCluster() string {
	if !c.clustered() {
		return ""
	}
	return " ON CLUSTER `" + c.cfg.Cluster + "`"
}

// localTable is the back-quoted name of a cluster's local table of name.
func (c *Client) localTable(name string) string {
	return "`" + c.cfg.Database + "`.`" + c.cfg.TablePrefix + name + localSuffix + "`"
}

// replicatedEngine turns a table's single-server engine into its
// replicated form by rule, so that every table definition, present or
// added later, gets one: "ReplacingMergeTree(version) ORDER BY id" becomes
// "ReplicatedReplacingMergeTree('<path>/<db>/<table>', '{replica}',
// version) ORDER BY id". The ZooKeeper path holds the {shard} macro
// (config checks it), so each shard's replicas share a path and shards do
// not.
func replicatedEngine(engine, zkPath, database, table string) (string, error) {
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
	return fmt.Sprintf("Replicated%s('%s', '{replica}'%s)%s", name, path, args, rest), nil
}

// shardingKey is the Distributed table's sharding expression: a hash of the
// first column of the table's ORDER BY, so that every row of one sorting key
// (what ReplacingMergeTree collapses) lands on one shard and FINAL through
// the Distributed table stays exact. For datapoints and sync_state that is
// variable_id, the key the sync's shards split by too.
func shardingKey(t tableDef) (string, error) {
	if t.shardBy != "" {
		return t.shardBy, nil
	}
	first := firstSortColumn(t)
	if first == "" {
		return "", fmt.Errorf("table %s: engine %q has no ORDER BY column to shard by", t.name, t.engine)
	}
	return "sipHash64(" + first + ")", nil
}

// migrateClusterTable creates and upgrades one table on the cluster, ON
// CLUSTER: a sharded table is a Replicated local table on every node under
// a Distributed table of the contract's name; any other table is a
// Replicated table of the contract's name whose replicas are all the nodes.
func (c *Client) migrateClusterTable(ctx context.Context, t tableDef) error {
	if !sharded(t) {
		name := c.cfg.TablePrefix + t.name
		path := strings.ReplaceAll(c.cfg.ZookeeperPath, "{shard}", everywhereShard)
		engine, err := replicatedEngine(t.engine, path, c.cfg.Database, name)
		if err != nil {
			return err
		}
		if err := c.conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+c.Table(t.name)+c.onCluster()+" ("+columnsDDL(t)+") ENGINE = "+engine); err != nil {
			return fmt.Errorf("create %s: %w", c.Table(t.name), err)
		}
		return c.addMissingColumns(ctx, t, name, c.Table(t.name))
	}
	local := c.cfg.TablePrefix + t.name + localSuffix
	engine, err := replicatedEngine(t.engine, c.cfg.ZookeeperPath, c.cfg.Database, local)
	if err != nil {
		return err
	}
	key, err := shardingKey(t)
	if err != nil {
		return err
	}
	cols := columnsDDL(t)
	if err := c.conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+c.localTable(t.name)+c.onCluster()+" ("+cols+") ENGINE = "+engine); err != nil {
		return fmt.Errorf("create %s: %w", c.localTable(t.name), err)
	}
	if err := c.addMissingColumns(ctx, t, local, c.localTable(t.name)); err != nil {
		return err
	}
	dist := fmt.Sprintf("Distributed('%s', '%s', '%s', %s)", c.cfg.Cluster, c.cfg.Database, local, key)
	if err := c.conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+c.Table(t.name)+c.onCluster()+" ("+cols+") ENGINE = "+dist); err != nil {
		return fmt.Errorf("create %s: %w", c.Table(t.name), err)
	}
	return c.addMissingColumns(ctx, t, c.cfg.TablePrefix+t.name, c.Table(t.name))
}

// LayoutError is a database whose tables are laid out for one server while
// clickhouse.cluster names a cluster, or the other way round. Migrate
// refuses to mix the two: it would leave points on both sides.
type LayoutError struct {
	Table, Engine, Cluster string
}

func (e *LayoutError) Error() string {
	if e.Cluster == "" {
		return fmt.Sprintf("table %s is a cluster's %s table but clickhouse.cluster is empty; set clickhouse.cluster to the cluster of the servers' remote_servers it belongs to",
			e.Table, e.Engine)
	}
	if e.Engine == "Distributed" || strings.HasPrefix(e.Engine, "Replicated") {
		return fmt.Sprintf("table %s is a %s table, not what this fleetsync lays out on cluster %q; drop it or use another clickhouse.database",
			e.Table, e.Engine, e.Cluster)
	}
	return fmt.Sprintf("table %s is a single-server %s table but clickhouse.cluster is %q; move its data to the cluster as docs/operations.md (From one server to a cluster) describes, or leave clickhouse.cluster empty",
		e.Table, e.Engine, e.Cluster)
}

// tableEngines maps the database's table names to their engines, on the
// server the client is connected to.
func (c *Client) tableEngines(ctx context.Context) (map[string]string, error) {
	rows, err := c.conn.Query(ctx, "SELECT name, engine FROM system.tables WHERE database = ?", c.cfg.Database)
	if err != nil {
		return nil, fmt.Errorf("read tables of %s: %w", c.cfg.Database, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			return nil, fmt.Errorf("read tables of %s: %w", c.cfg.Database, err)
		}
		out[name] = engine
	}
	return out, rows.Err()
}

// checkLayout returns a *LayoutError when a table of the schema exists in
// the other layout than the configuration asks for: on one server no
// Distributed or Replicated table, on a cluster a Distributed table for a
// sharded one and a Replicated one for the rest.
func (c *Client) checkLayout(engines map[string]string) error {
	for _, t := range schema {
		name := c.cfg.TablePrefix + t.name
		engine, ok := engines[name]
		if !ok {
			continue
		}
		clusterEngine := engine == "Distributed" || strings.HasPrefix(engine, "Replicated")
		fits := clusterEngine == c.clustered()
		if c.clustered() && fits {
			fits = (engine == "Distributed") == sharded(t)
		}
		if !fits {
			return &LayoutError{Table: c.cfg.Database + "." + name, Engine: engine, Cluster: c.cfg.Cluster}
		}
	}
	return nil
}

// schemaComplete reports whether this server already has every table and
// column of the schema (both layers on a cluster) and the schema version
// recorded, so that EnsureSchema can skip the ON CLUSTER statements, which
// wait for every node and would stall each cycle while one is down.
func (c *Client) schemaComplete(ctx context.Context, engines map[string]string) (bool, error) {
	for _, t := range schema {
		names := []string{c.cfg.TablePrefix + t.name}
		if c.clustered() && sharded(t) {
			names = append(names, c.cfg.TablePrefix+t.name+localSuffix)
		}
		for _, name := range names {
			if _, ok := engines[name]; !ok {
				return false, nil
			}
			have, err := c.columnTypesOf(ctx, name)
			if err != nil {
				return false, err
			}
			for _, col := range t.columns {
				if _, ok := have[col.name]; !ok {
					return false, nil
				}
			}
		}
	}
	v, err := c.AppliedSchemaVersion(ctx)
	return err == nil && v >= SchemaVersion, err
}

// EnsureSchema is Migrate for every cycle: on a cluster it runs the DDL only
// when this server lacks a table or column (a node that missed some DDL
// gets it from the cluster's DDL queue, or from `fleetsync migrate`); on
// one server it is Migrate.
func (c *Client) EnsureSchema(ctx context.Context) error {
	if !c.clustered() {
		return c.Migrate(ctx)
	}
	engines, err := c.tableEngines(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := c.checkLayout(engines); err != nil {
		return err
	}
	c.checkLoadBalancing(ctx)
	done, err := c.schemaComplete(ctx, engines)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if done {
		return nil
	}
	return c.Migrate(ctx)
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
// rollups need more: see checkLoadBalancing.
func clusterSettings(cfg Config) map[string]any {
	if cfg.Cluster == "" {
		return nil
	}
	return map[string]any{"insert_distributed_sync": 1}
}

// checkLoadBalancing warns when the user's profile lets Distributed reads
// pick any replica. The rollups are recomputed from datapoints FINAL right
// after its rows are acknowledged; with load_balancing in_order, the write
// and the read go to the same (first healthy) replica of each shard, so the
// read sees the write. With random balancing it may read a replica that has
// not fetched the part yet and leave an hour short until the next cycle
// that re-reads it (a README query through the test cluster showed half
// the hourly rows missing). The setting cannot travel with the session:
// ClickHouse 18.16's native protocol takes only numeric settings from
// clients, so it belongs in the profile (deploy/clickhouse).
func (c *Client) checkLoadBalancing(ctx context.Context) {
	var v string
	if err := c.conn.QueryRow(ctx, "SELECT value FROM system.settings WHERE name = 'load_balancing'").Scan(&v); err != nil {
		c.log.Warn("could not read the load_balancing setting of the ClickHouse user", zap.Error(err))
		return
	}
	if v != "in_order" {
		c.log.Warn("clickhouse.cluster: the user's profile has load_balancing="+v+
			"; set <load_balancing>in_order</load_balancing> in it (deploy/clickhouse/users.d-fleetsync.xml) so that reads follow writes, or the analyst tables may miss rows loaded moments before",
			zap.String("load_balancing", v))
	}
}
