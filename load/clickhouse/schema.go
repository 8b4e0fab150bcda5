package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Schema creates and upgrades fleetsync's tables (Migrate), checks that a
// daemon may start on them (EnsureSchema) and reports the version they are
// at. On a cluster it also lays the tables out over the shards and records
// that layout (cluster.go, placement.go). Client.Schema returns it.
type Schema struct{ *pool }

// Names of fleetsync's tables, before Config.TablePrefix is applied.
const (
	TableDatapoints       = "datapoints"
	TableDevices          = "devices"
	TableVariables        = "variables"
	TableSyncState        = "sync_state"
	TableSyncLease        = "sync_lease"
	TableSyncWatermark    = "sync_watermark"
	TableSchemaMigrations = "schema_migrations"
	// The rest of the fleet's metadata (see fleet.go).
	TableOrganizations      = "organizations"
	TableDeviceGroups       = "device_groups"
	TableDeviceGroupMembers = "device_group_members"
	TableDeviceGroupChanges = "device_group_member_changes"
	TableEventLogs          = "event_logs"
	TableEventState         = "event_state"
	// The analysts' rollups of datapoints (see rollup.go).
	TableLatest = "datapoints_latest"
	TableHourly = "datapoints_hourly"
)

// SchemaVersion is the schema this code writes. Migrate records it in
// schema_migrations; bump it (and add the columns to the definitions below)
// whenever the schema changes.
//
// 5: on a cluster, the sharded tables' shard_key column and sharding key,
// variable_shards and shard_layout (placement.go), and replica names of the
// whole-cluster tables made of both macros (cluster.go).
//
// 6: sync_state's reread_ms (pipeline.Mark.RereadMs), and sync_watermark.
//
// 7: sync_state's rechecked_ms (pipeline.Mark.RecheckedMs).
//
// 8: sync_state's lookback_ms (pipeline.Mark.LookbackMs).
const SchemaVersion = 8

// column is one column of a table: its type, and the DEFAULT expression
// used when it is added to an existing table or left out of an INSERT.
type column struct {
	name, typ, dflt string
}

// tableDef describes a table as the current code needs it. Columns are only
// ever added at the end of a definition, never removed or retyped, so
// Migrate can upgrade an older table by adding what is missing.
type tableDef struct {
	name    string
	columns []column
	engine  string
	// shardBy is the Distributed table's sharding expression on a cluster;
	// empty means the rule of shardingKey (a hash of the first ORDER BY
	// column).
	shardBy string
	// everywhere keeps a table whose rows are per variable whole on every
	// node of a cluster instead of sharding it (see sharded).
	everywhere bool
	// clusterOnly tables exist on a cluster alone (the placement's, see
	// placement.go): one server has no shards to place rows on.
	clusterOnly bool
}

// pointColumns are the columns a table of points has, datapoints and the
// latest point of each variable alike, then more: the rollup fills the
// latest from datapoints column for column, so both must say the same.
func pointColumns(more ...column) []column {
	return append([]column{
		{name: "variable_id", typ: "String"},
		{name: "device_id", typ: "String"},
		{name: "device_label", typ: "String"},
		{name: "variable_label", typ: "String"},
		{name: "ts_ms", typ: "Int64"},
		{name: "ts", typ: "DateTime('UTC')"},
		{name: "value", typ: "Float64"},
		{name: "context", typ: "String"},
		{name: "lat", typ: "Nullable(Float64)"},
		{name: "lng", typ: "Nullable(Float64)"},
	}, more...)
}

// schema is every table fleetsync owns. ClickHouse 18.16 knows neither
// `ADD COLUMN IF NOT EXISTS` nor DateTime64, so upgrades compare against
// system.columns and timestamps are Int64 milliseconds beside a DateTime.
var schema = []tableDef{
	{
		name: TableDatapoints,
		columns: pointColumns(
			// Filled by the server: it is the load time and costs the
			// client nothing per row.
			column{name: "loaded_at", typ: "DateTime('UTC')", dflt: "now()"},
			column{name: "version", typ: "UInt64"},
		),
		// version is the load time in ns: a re-read of the same
		// (variable_id, ts_ms) replaces the earlier row.
		engine: "ReplacingMergeTree(version) PARTITION BY toYYYYMM(ts) ORDER BY (variable_id, ts_ms)",
	},
	{
		name: TableDevices,
		columns: []column{
			{name: "id", typ: "String"},
			{name: "label", typ: "String"},
			{name: "name", typ: "String"},
			{name: "description", typ: "String"},
			{name: "url", typ: "String"},
			{name: "properties", typ: "String"},
			{name: "tags", typ: "Array(String)"},
			{name: "organization_id", typ: "String"},
			{name: "created_at", typ: "DateTime('UTC')"},
			{name: "last_activity_ms", typ: "Int64"},
			{name: "deleted", typ: "UInt8"},
			{name: "synced_at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY id",
	},
	{
		name: TableVariables,
		columns: []column{
			{name: "id", typ: "String"},
			{name: "device_id", typ: "String"},
			{name: "label", typ: "String"},
			{name: "name", typ: "String"},
			{name: "properties", typ: "String"},
			{name: "color", typ: "String"},
			{name: "created_at", typ: "DateTime('UTC')"},
			{name: "last_activity_ms", typ: "Int64"},
			{name: "deleted", typ: "UInt8"},
			{name: "synced_at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
			{name: "device_label", typ: "String"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY id",
	},
	syncStateTable,
	syncWatermarkTable,
	{
		name: TableSyncLease,
		columns: []column{
			{name: "name", typ: "String"},
			{name: "holder", typ: "String"},
			{name: "token", typ: "String"},
			{name: "expires_at_ms", typ: "Int64"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY name",
	},
	{
		name: TableOrganizations,
		columns: []column{
			{name: "id", typ: "String"},
			{name: "label", typ: "String"},
			{name: "name", typ: "String"},
			{name: "url", typ: "String"},
			{name: "created_at", typ: "DateTime('UTC')"},
			{name: "deleted", typ: "UInt8"},
			{name: "synced_at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY id",
	},
	{
		name: TableDeviceGroups,
		columns: []column{
			{name: "id", typ: "String"},
			{name: "label", typ: "String"},
			{name: "name", typ: "String"},
			{name: "url", typ: "String"},
			{name: "organization_id", typ: "String"},
			{name: "tags", typ: "Array(String)"},
			{name: "created_at", typ: "DateTime('UTC')"},
			{name: "deleted", typ: "UInt8"},
			{name: "synced_at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY id",
	},
	{
		// One row per (group, device) ever seen together: removed = 1 once
		// the device left the group. The current membership is
		// `FINAL WHERE removed = 0`.
		name: TableDeviceGroupMembers,
		columns: []column{
			{name: "group_id", typ: "String"},
			{name: "device_id", typ: "String"},
			{name: "removed", typ: "UInt8"},
			// joined_at is the first snapshot of the current spell of
			// membership; snapshot_at the latest snapshot that saw the
			// row's state.
			{name: "joined_at", typ: "DateTime('UTC')"},
			{name: "snapshot_at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY (group_id, device_id)",
	},
	{
		// The membership history: one row per change fleetsync saw, at the
		// snapshot that saw it.
		name: TableDeviceGroupChanges,
		columns: []column{
			{name: "group_id", typ: "String"},
			{name: "device_id", typ: "String"},
			{name: "change", typ: "String"},
			{name: "at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY (group_id, device_id, at, change)",
	},
	{
		name: TableEventLogs,
		columns: []column{
			// event is the key as configured (an id or a ~label).
			{name: "event", typ: "String"},
			{name: "id", typ: "String"},
			{name: "created_at", typ: "DateTime('UTC')"},
			{name: "created_at_us", typ: "Int64"},
			// log is the whole log object as JSON text: its fields beyond
			// id and createdAt are not documented.
			{name: "log", typ: "String"},
			{name: "synced_at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY (event, id)",
	},
	{
		name: TableEventState,
		columns: []column{
			{name: "event", typ: "String"},
			{name: "hwm_us", typ: "Int64"},
			// hwm_ids are the logs loaded at exactly hwm_us.
			{name: "hwm_ids", typ: "Array(String)"},
			{name: "updated_at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) ORDER BY event",
	},
	{
		name: TableSchemaMigrations,
		columns: []column{
			{name: "version", typ: "UInt32"},
			{name: "applied_at", typ: "DateTime('UTC')"},
		},
		engine: "ReplacingMergeTree ORDER BY version",
	},
	{
		// The newest point of each variable, recomputed after every load
		// that touched the variable (rollup.go).
		name:    TableLatest,
		columns: pointColumns(column{name: "version", typ: "UInt64"}),
		// version is the time the recompute was started, after the points
		// it covers were acknowledged: the latest recompute wins.
		engine: "ReplacingMergeTree(version) ORDER BY variable_id",
	},
	{
		// Per variable and hour, the aggregates of its points.
		name: TableHourly,
		columns: []column{
			{name: "variable_id", typ: "String"},
			{name: "device_id", typ: "String"},
			{name: "hour", typ: "DateTime('UTC')"},
			{name: "count", typ: "UInt64"},
			{name: "sum", typ: "Float64"},
			{name: "min", typ: "Float64"},
			{name: "max", typ: "Float64"},
			{name: "first_value", typ: "Float64"},
			{name: "last_value", typ: "Float64"},
			{name: "first_ts_ms", typ: "Int64"},
			{name: "last_ts_ms", typ: "Int64"},
			{name: "version", typ: "UInt64"},
		},
		engine: "ReplacingMergeTree(version) PARTITION BY toYYYYMM(hour) ORDER BY (variable_id, hour)",
	},
	{
		// The sharding key of every variable that had rows when the
		// cluster last grew (placement.go). A small granule: a writer
		// reads the table whole, but an operator looks variables up.
		name: TableVariableShards,
		columns: []column{
			{name: "variable_id", typ: "String"},
			{name: "shard_key", typ: "UInt64"},
			{name: "recorded_at", typ: "DateTime('UTC')"},
		},
		engine:      "ReplacingMergeTree ORDER BY variable_id SETTINGS index_granularity = 1024",
		everywhere:  true,
		clusterOnly: true,
	},
	{
		// The shard weights new variables are placed by, one row each
		// time migrate recorded them; the greatest version holds.
		name: TableShardLayout,
		columns: []column{
			{name: "weights", typ: "Array(UInt64)"},
			{name: "recorded_at", typ: "DateTime('UTC')"},
			{name: "version", typ: "UInt64"},
		},
		engine:      "ReplacingMergeTree ORDER BY version",
		clusterOnly: true,
	},
}

func (col column) ddl() string {
	s := "`" + col.name + "` " + col.typ
	if col.dflt != "" {
		s += " DEFAULT " + col.dflt
	}
	return s
}

// Migrate creates the database and every table, and upgrades older tables by
// adding the columns they lack. Running it again changes nothing. It is safe
// to run concurrently with another Migrate (two overlapping cycles). On a
// cluster (Config.Cluster) every statement runs ON CLUSTER and each table is
// a Replicated local table under a Distributed one (see cluster.go); a
// database laid out the other way is refused with a *LayoutError.
//
// On a cluster whose remote_servers lists shards appended since the last
// Migrate, it also records where every variable's rows are, so that new
// variables spread over every shard while the others stay (see
// placement.go); only Migrate does this, not EnsureSchema.
func (c *Schema) Migrate(ctx context.Context) error { return c.migrate(ctx, true) }

// migrate is Migrate; grow says whether shards appended to remote_servers
// since the last record are taken into the placement now.
func (c *Schema) migrate(ctx context.Context, grow bool) error {
	var prep *clusterPrep
	if c.clustered() {
		// Before anything is created: a configuration that cannot work
		// is refused with one line (see prepareCluster).
		var err error
		if prep, err = c.prepareCluster(ctx); err != nil {
			return err
		}
	}
	if err := c.conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+c.cfg.Database+"`"+c.cluster().onCluster()); err != nil {
		return fmt.Errorf("migrate: create database %s: %w", c.cfg.Database, err)
	}
	engines, err := c.tableEngines(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := c.checkLayout(engines); err != nil {
		return err
	}
	for _, t := range schema {
		var err error
		switch {
		case c.clustered():
			err = c.migrateClusterTable(ctx, t, prep)
		case !t.clusterOnly:
			err = c.migrateTable(ctx, t)
		}
		if err != nil {
			return fmt.Errorf("migrate %s: %w", c.table(t.name), err)
		}
	}
	if c.clustered() {
		if err := c.migrateLayout(ctx, prep, grow); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if err := c.recordSchemaVersion(ctx); err != nil {
		return fmt.Errorf("migrate: record schema version: %w", err)
	}
	return nil
}

func (c *Schema) migrateTable(ctx context.Context, t tableDef) error {
	create := "CREATE TABLE IF NOT EXISTS " + c.table(t.name) + " (" + columnsDDL(t) + ") ENGINE = " + t.engine
	if err := c.conn.Exec(ctx, create); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	return c.addMissingColumns(ctx, t, c.cfg.TablePrefix+t.name, c.table(t.name))
}

// columnsDDL is the column list of a CREATE TABLE.
func columnsDDL(t tableDef) string {
	cols := make([]string, len(t.columns))
	for i, col := range t.columns {
		cols[i] = col.ddl()
	}
	return strings.Join(cols, ", ")
}

// addMissingColumns adds to the table named name (qualified: its quoted
// full name) the columns of t it lacks, in t's order.
func (c *Schema) addMissingColumns(ctx context.Context, t tableDef, name, qualified string) error {
	have, err := c.columnTypesOf(ctx, name)
	if err != nil {
		return err
	}
	for i, col := range t.columns {
		typ, ok := have[col.name]
		if ok {
			if typ != col.typ {
				// Never retype a column behind the user's back; inserts
				// will say precisely what does not fit.
				c.log.Warn("column type differs from fleetsync's schema",
					zap.String("table", name), zap.String("column", col.name),
					zap.String("have", typ), zap.String("want", col.typ))
			}
			continue
		}
		alter := "ALTER TABLE " + qualified + c.cluster().onCluster() + " ADD COLUMN " + col.ddl()
		if i > 0 {
			alter += " AFTER `" + t.columns[i-1].name + "`"
		}
		if err := c.conn.Exec(ctx, alter); err != nil {
			// A concurrent Migrate may have added it in the meantime.
			if again, qerr := c.columnTypesOf(ctx, name); qerr == nil {
				if _, ok := again[col.name]; ok {
					continue
				}
			}
			return fmt.Errorf("add column %s: %w", col.name, err)
		}
		c.log.Info("added column", zap.String("table", name), zap.String("column", col.name))
		have[col.name] = col.typ
	}
	return nil
}

// columnTypesOf maps the columns of the table named name (prefix
// included) to their types.
func (c *Schema) columnTypesOf(ctx context.Context, name string) (map[string]string, error) {
	rows, err := c.conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ?",
		c.cfg.Database, name)
	if err != nil {
		return nil, fmt.Errorf("read columns: %w", err)
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, fmt.Errorf("read columns: %w", err)
		}
		have[name] = typ
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns: %w", err)
	}
	return have, nil
}

func (c *Schema) recordSchemaVersion(ctx context.Context) error {
	var n uint64
	if err := c.conn.QueryRow(ctx, "SELECT count() FROM "+c.table(TableSchemaMigrations)+" WHERE version = ?", uint32(SchemaVersion)).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	// INSERT ... VALUES through Exec hangs on 18.16 (the server waits for
	// data blocks), so even one row goes through a batch.
	return c.retry(ctx, TableSchemaMigrations, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+c.table(TableSchemaMigrations)+" (version, applied_at)")
		if err != nil {
			return err
		}
		defer b.Abort()
		if err := b.Append(uint32(SchemaVersion), time.Now().UTC()); err != nil {
			return err
		}
		return b.Send()
	})
}

// AppliedSchemaVersion is the greatest schema version Migrate has recorded,
// 0 when the database has never been migrated.
func (c *Schema) AppliedSchemaVersion(ctx context.Context) (uint32, error) {
	var exists uint8
	if err := c.conn.QueryRow(ctx, "SELECT count() > 0 FROM system.tables WHERE database = ? AND name = ?",
		c.cfg.Database, c.cfg.TablePrefix+TableSchemaMigrations).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if exists == 0 {
		return 0, nil
	}
	var v uint32
	if err := c.conn.QueryRow(ctx, "SELECT max(version) FROM "+c.table(TableSchemaMigrations)).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
