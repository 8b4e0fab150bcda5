package clickhouse

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"
)

// The cluster side of Schema: what Migrate learns of a cluster before it
// creates anything (its macros, its layout of shards and the layouts
// recorded before), the Replicated and Distributed tables it creates ON
// CLUSTER, and the checks EnsureSchema runs every cycle. cluster.go holds
// what every port shares on a cluster (table names, engines, settings).

// clusterPrep is what Migrate learned of the cluster before creating
// anything: its layout now and the layouts recorded before.
type clusterPrep struct {
	current, first, last layout
}

// w0 is the total weight the shard_key DEFAULT is written for: the first
// recorded layout's, or today's for a database that has none yet.
func (p *clusterPrep) w0() uint64 {
	if p.first != nil {
		return p.first.total()
	}
	return p.current.total()
}

// ClusterError is a cluster on which fleetsync cannot lay out or place its
// tables, found before anything is created or written. Setting names what
// to fix; it is not retryable.
type ClusterError struct {
	Setting, Reason string
}

func (e *ClusterError) Error() string { return e.Setting + ": " + e.Reason }

// layoutMoved is the error of a cluster whose shards are not the recorded
// ones with shards appended.
func (c *Schema) layoutMoved(current, recorded layout) error {
	return &ClusterError{Setting: "remote_servers", Reason: fmt.Sprintf("cluster %s has shards of weights %v but its rows are placed for %v; put those shards and weights back, first and in that order, and append new shards after them (docs/operations.md, Adding a ClickHouse shard)", c.cfg.Cluster, current, recorded)}
}

// prepareCluster checks, on the server the client is connected to, what
// Migrate needs of the cluster, and reads the layouts: clickhouse.cluster
// names a cluster of its remote_servers, the server has both macros, and
// the shards are the recorded ones with shards appended at most (rows are
// placed by their position and weight; see placement.go).
func (c *Schema) prepareCluster(ctx context.Context) (*clusterPrep, error) {
	current, err := c.currentLayout(ctx)
	if err != nil {
		return nil, err
	}
	if len(current) == 0 {
		var names []string
		if rows, err := c.conn.Query(ctx, "SELECT DISTINCT cluster FROM system.clusters ORDER BY cluster"); err == nil {
			for rows.Next() {
				var n string
				if rows.Scan(&n) == nil {
					names = append(names, n)
				}
			}
			rows.Close()
		}
		return nil, &ClusterError{Setting: "clickhouse.cluster", Reason: fmt.Sprintf("the server has no cluster %q in its remote_servers (it has %v); name one of them, or add it to remote_servers on every server", c.cfg.Cluster, names)}
	}
	macros := map[string]bool{}
	rows, err := c.conn.Query(ctx, "SELECT macro FROM system.macros")
	if err != nil {
		return nil, fmt.Errorf("read the server's macros: %w", err)
	}
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the server's macros: %w", err)
		}
		macros[m] = true
	}
	rows.Close()
	for _, m := range []string{"shard", "replica"} {
		if !macros[m] {
			return nil, &ClusterError{Setting: "macros", Reason: fmt.Sprintf("the server has no {%s} macro; give every server <macros> with <shard> (its shard) and <replica> (unique within its shard)", m)}
		}
	}
	if err := c.checkMacros(ctx); err != nil {
		return nil, err
	}
	p := &clusterPrep{current: current}
	if p.first, p.last, err = c.cluster().recordedLayouts(ctx); err != nil {
		return nil, err
	}
	if p.last != nil && !current.extends(p.last) {
		return nil, c.layoutMoved(current, p.last)
	}
	return p, nil
}

// checkMacros reads the macros of every server of the cluster, through
// remote() as remote_servers' default user, and refuses macros that cannot
// work: two replicas of one shard with one {replica} (ClickHouse refuses
// the second, after the first tables exist), two shards with one {shard}
// (they would be one replica set: each shard's rows on both), one shard's
// servers with different {shard} (they would not replicate each other). A
// server remote() cannot read (a password on that user, a server down) is
// left out: ON CLUSTER then says what is wrong with it.
func (c *Schema) checkMacros(ctx context.Context) error {
	type server struct {
		shard uint32
		addr  string
	}
	var servers []server
	rows, err := c.conn.Query(ctx, "SELECT shard_num, host_address, port FROM system.clusters WHERE cluster = ? ORDER BY shard_num, replica_num", c.cfg.Cluster)
	if err != nil {
		return fmt.Errorf("read the servers of cluster %s: %w", c.cfg.Cluster, err)
	}
	for rows.Next() {
		var s server
		var host string
		var port uint16
		if err := rows.Scan(&s.shard, &host, &port); err != nil {
			rows.Close()
			return fmt.Errorf("read the servers of cluster %s: %w", c.cfg.Cluster, err)
		}
		s.addr = net.JoinHostPort(host, strconv.Itoa(int(port)))
		servers = append(servers, s)
	}
	rows.Close()
	shardOf := map[uint32]string{}      // shard_num -> its {shard}
	numOf := map[string]uint32{}        // {shard} -> shard_num
	replicaAt := map[[2]string]string{} // {shard}, {replica} -> server
	for _, s := range servers {
		var shard, replica string
		err := c.conn.QueryRow(ctx, "SELECT anyIf(substitution, macro = 'shard'), anyIf(substitution, macro = 'replica') FROM remote('"+s.addr+"', system, macros)").Scan(&shard, &replica)
		if err != nil {
			c.log.Info("could not read a server's macros; ON CLUSTER will check it", zap.String("server", s.addr), zap.Error(err))
			continue
		}
		switch {
		case shard == "" || replica == "":
			return &ClusterError{Setting: "macros", Reason: fmt.Sprintf("server %s of cluster %s lacks the {shard} or {replica} macro; give every server <macros> with <shard> (its shard) and <replica> (unique within its shard)", s.addr, c.cfg.Cluster)}
		case shardOf[s.shard] != "" && shardOf[s.shard] != shard:
			return &ClusterError{Setting: "macros", Reason: fmt.Sprintf("the servers of shard %d of cluster %s have {shard} %s and %s; give every server of a shard the same {shard}", s.shard, c.cfg.Cluster, shardOf[s.shard], shard)}
		case numOf[shard] != 0 && numOf[shard] != s.shard:
			return &ClusterError{Setting: "macros", Reason: fmt.Sprintf("shards %d and %d of cluster %s both have {shard} %s; give each shard its own", numOf[shard], s.shard, c.cfg.Cluster, shard)}
		case replicaAt[[2]string{shard, replica}] != "":
			return &ClusterError{Setting: "macros", Reason: fmt.Sprintf("servers %s and %s of shard %s both have {replica} %s; give each replica of a shard its own", replicaAt[[2]string{shard, replica}], s.addr, shard, replica)}
		}
		shardOf[s.shard], numOf[shard], replicaAt[[2]string{shard, replica}] = shard, s.shard, s.addr
	}
	return nil
}

// migrateLayout records the placement after the tables exist: the
// layout, the first time; and, when grow is set and shards were appended
// since the last record, every variable that has rows, with the key its
// rows carry, then the new layout, so that the variables seen from then
// on spread over every shard while the others stay where their rows are
// (placement.go).
//
// A growth's records and layout are inserted with insert_quorum set to
// every server of the cluster: the INSERT returns once every replica
// holds the rows, so that a writer started after migrate reads the
// records and the new layout together on whichever server it reaches
// (with a replica down, migrate fails, as its ON CLUSTER statements do).
// The first layout is not: 18.16 runs one quorum INSERT per table at a
// time, and the shards' first cycles record it at once, all alike. The
// syncs must be stopped during a growth (docs/operations.md): a writer
// that keyed a new variable by the old layout after its records were
// taken would leave it on two shards.
func (c *Schema) migrateLayout(ctx context.Context, p *clusterPrep, grow bool) error {
	var servers uint64
	if err := c.conn.QueryRow(ctx, "SELECT count() FROM system.clusters WHERE cluster = ?", c.cfg.Cluster).Scan(&servers); err != nil {
		return fmt.Errorf("count the servers of cluster %s: %w", c.cfg.Cluster, err)
	}
	qctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_quorum": int(servers)}))
	switch {
	case p.last == nil:
		if err := c.recordLayout(ctx, p.current); err != nil {
			return fmt.Errorf("record the shard layout: %w", err)
		}
	case len(p.current) > len(p.last) && !grow:
		c.log.Warn("the cluster has more shards than fleetsync places variables on: new variables keep going to the first ones until `fleetsync migrate` runs, with the syncs stopped (docs/operations.md, Adding a ClickHouse shard)",
			zap.String("shards", p.current.String()), zap.String("placed_for", p.last.String()))
	case len(p.current) > len(p.last):
		t0 := time.Now()
		// The latest rows too: a variable whose points were all deleted
		// by hand keeps its latest row, which its next points must join.
		if err := c.retry(qctx, TableVariableShards, func(ctx context.Context) error {
			return c.conn.Exec(ctx, "INSERT INTO "+c.table(TableVariableShards)+" (variable_id, shard_key, recorded_at) SELECT variable_id, any(shard_key), now() FROM (SELECT variable_id, shard_key FROM "+
				c.table(TableDatapoints)+" UNION ALL SELECT variable_id, shard_key FROM "+c.table(TableLatest)+") GROUP BY variable_id")
		}); err != nil {
			return fmt.Errorf("record where the variables' rows are: %w", err)
		}
		if err := c.recordLayout(qctx, p.current); err != nil {
			return fmt.Errorf("record the shard layout: %w", err)
		}
		c.log.Info("the cluster grew: recorded every variable where its rows are, and the new shard layout for new variables",
			zap.String("from", p.last.String()), zap.String("to", p.current.String()), zap.Duration("took", time.Since(t0)))
	}
	_, err := c.cluster().loadPlacement(ctx)
	return err
}

// migrateClusterTable creates and upgrades one table on the cluster, ON
// CLUSTER: a sharded table is a Replicated local table on every node under
// a Distributed table of the contract's name, sharded by shard_key; any
// other table is a Replicated table of the contract's name whose replicas
// are all the nodes.
//
// A sharded table of schema version 4 or older is upgraded in place: its
// local and Distributed tables get the shard_key column, whose DEFAULT
// keys the rows already there as sipHash64(variable_id) placed them, and
// its Distributed table, which holds no rows (inserts are synchronous), is
// dropped and created again sharded by shard_key. Meanwhile inserts
// through it fail, so the syncs should be stopped (docs/operations.md).
func (c *Schema) migrateClusterTable(ctx context.Context, t tableDef, p *clusterPrep) error {
	if !sharded(t) {
		name := c.cfg.TablePrefix + t.name
		path := strings.ReplaceAll(c.cfg.ZookeeperPath, "{shard}", everywhereShard)
		engine, err := replicatedEngine(t.engine, path, c.cfg.Database, name, wholeReplica)
		if err != nil {
			return err
		}
		if err := c.conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+c.table(t.name)+c.cluster().onCluster()+" ("+columnsDDL(t)+") ENGINE = "+engine); err != nil {
			return fmt.Errorf("create %s: %w", c.table(t.name), err)
		}
		return c.addMissingColumns(ctx, t, name, c.table(t.name))
	}
	ct := t
	ct.columns = clusterColumns(t, p.w0())
	local := c.cfg.TablePrefix + t.name + localSuffix
	engine, err := replicatedEngine(t.engine, c.cfg.ZookeeperPath, c.cfg.Database, local, shardReplica)
	if err != nil {
		return err
	}
	key, err := shardingKey(t)
	if err != nil {
		return err
	}
	cols := columnsDDL(ct)
	if err := c.conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+c.cluster().localTable(t.name)+c.cluster().onCluster()+" ("+cols+") ENGINE = "+engine); err != nil {
		return fmt.Errorf("create %s: %w", c.cluster().localTable(t.name), err)
	}
	if err := c.addMissingColumns(ctx, ct, local, c.cluster().localTable(t.name)); err != nil {
		return err
	}
	dist := fmt.Sprintf("Distributed('%s', '%s', '%s', %s)", c.cfg.Cluster, c.cfg.Database, local, key)
	create := "CREATE TABLE IF NOT EXISTS " + c.table(t.name) + c.cluster().onCluster() + " (" + cols + ") ENGINE = " + dist
	if err := c.conn.Exec(ctx, create); err != nil {
		return fmt.Errorf("create %s: %w", c.table(t.name), err)
	}
	var ddl string
	if err := c.conn.QueryRow(ctx, "SELECT create_table_query FROM system.tables WHERE database = ? AND name = ?", c.cfg.Database, c.cfg.TablePrefix+t.name).Scan(&ddl); err != nil {
		return fmt.Errorf("read the definition of %s: %w", c.table(t.name), err)
	}
	if !strings.Contains(ddl, ", "+key+")") {
		c.log.Info("sharding by the variables' recorded keys: creating the Distributed table again", zap.String("table", t.name), zap.String("was", ddl))
		if err := c.conn.Exec(ctx, "DROP TABLE IF EXISTS "+c.table(t.name)+c.cluster().onCluster()); err != nil {
			return fmt.Errorf("drop %s to shard it by %s: %w", c.table(t.name), key, err)
		}
		if err := c.conn.Exec(ctx, create); err != nil {
			return fmt.Errorf("create %s: %w", c.table(t.name), err)
		}
	}
	return c.addMissingColumns(ctx, ct, c.cfg.TablePrefix+t.name, c.table(t.name))
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
func (c *Schema) tableEngines(ctx context.Context) (map[string]string, error) {
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
func (c *Schema) checkLayout(engines map[string]string) error {
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
func (c *Schema) schemaComplete(ctx context.Context, engines map[string]string) (bool, error) {
	for _, t := range schema {
		if t.clusterOnly && !c.clustered() {
			continue
		}
		names := []string{c.cfg.TablePrefix + t.name}
		if c.clustered() && sharded(t) {
			names = append(names, c.cfg.TablePrefix+t.name+localSuffix)
			// Only the name is compared: the DEFAULT does not matter.
			t.columns = clusterColumns(t, 1)
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
// gets it from the cluster's DDL queue, or from `fleetsync migrate`) or
// the cluster has shards the placement does not use yet, refuses shards
// that moved (checkPlacement), never changes the placement, and loads it
// for the cycle's writes; on one server it is Migrate.
func (c *Schema) EnsureSchema(ctx context.Context) error {
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
	done, err := c.schemaComplete(ctx, engines)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !done {
		return c.migrate(ctx, false)
	}
	return c.checkPlacement(ctx)
}

// checkPlacement refuses a cycle on a cluster whose shards are no longer
// the recorded ones with shards appended (rows would go to other shards
// than their variables' earlier rows), creates the tables on shards
// appended without `fleetsync migrate` (which get no variable until it
// runs), and loads the placement the cycle's rows are keyed by.
func (c *Schema) checkPlacement(ctx context.Context) error {
	current, err := c.currentLayout(ctx)
	if err != nil {
		return err
	}
	_, last, err := c.cluster().recordedLayouts(ctx)
	if err != nil {
		return err
	}
	switch {
	case last == nil:
		return c.migrate(ctx, false)
	case !current.extends(last):
		return c.layoutMoved(current, last)
	case len(current) > len(last):
		// Every INSERT through a Distributed table reaches every shard,
		// even one it has no rows for, so the new servers need the tables
		// before anything else works; migrate(false) creates them, says to
		// run migrate, and keeps the recorded placement.
		return c.migrate(ctx, false)
	}
	_, err = c.cluster().loadPlacement(ctx)
	return err
}
