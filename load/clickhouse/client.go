// Package clickhouse is fleetsync's warehouse side: it creates and upgrades
// the tables, loads datapoints batches through clickhouse-go's columnar API
// over the native protocol, keeps the analyst tables, writes the device and
// variable snapshots, keeps the marks, and reads back what landed for status
// and verify. Each of these is its own type over one connection pool (see
// Client), so that each port of the pipeline is served by a type of its own
// size.
//
// Every statement names its database and table explicitly and back-quotes
// them, so the client never depends on a connection's default database.
// The schema works on ClickHouse 18.16 and on current releases.
package clickhouse

import (
	"context"
	"crypto/tls"
	"fmt"
	"regexp"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Config says where the warehouse is and how hard to try.
type Config struct {
	// Addr lists native-protocol addresses, "host:port"; tried in order.
	Addr     []string
	Database string
	Username string
	// Password is never logged nor put in an error.
	Password string
	// TablePrefix is prepended to every table name (tests and shared
	// databases); empty by default.
	TablePrefix string
	// DialTimeout bounds connecting and acquiring a pooled connection;
	// 0 means 10s.
	DialTimeout time.Duration
	// InsertTimeout bounds one attempt of one write statement; 0 means 2m.
	InsertTimeout time.Duration
	// MaxElapsed is the retry budget of one write: once it is spent the last
	// error is returned; 0 means 2m.
	MaxElapsed time.Duration
	// MaxOpenConns caps the connection pool; 0 means 4.
	MaxOpenConns int
	// Compression is CompressionAuto (the default when empty), lz4, zstd
	// or none.
	Compression string
	// TLS, when set, dials the native protocol over TLS with it (see
	// TLSConfig); nil dials plain TCP.
	TLS *tls.Config
	// Cluster, when set, is the servers' cluster: see cluster.go.
	Cluster string
	// ZookeeperPath prefixes the replicated tables' ZooKeeper paths; it
	// holds {shard}. Empty means DefaultZookeeperPath.
	ZookeeperPath string
}

// DefaultZookeeperPath is the ZooKeeper path prefix of replicated tables.
const DefaultZookeeperPath = "/clickhouse/tables/{shard}"

// String describes the configuration without the password, so a Config can
// be logged or printed safely.
func (c Config) String() string {
	pw := ""
	if c.Password != "" {
		pw = " password=<redacted>"
	}
	return fmt.Sprintf("clickhouse addr=%v database=%s user=%s%s prefix=%q tls=%t compression=%s", c.Addr, c.Database, c.Username, pw, c.TablePrefix, c.TLS != nil, c.Compression)
}

// ConfigError is a configuration the client cannot use: the CLI reports it
// and exits with status 2 rather than retrying.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("clickhouse config: %s: %s", e.Field, e.Reason)
}

var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate returns a *ConfigError for the first unusable setting.
func (c Config) Validate() error {
	if len(c.Addr) == 0 {
		return &ConfigError{Field: "addr", Reason: "no address given; set clickhouse.addr, e.g. [\"127.0.0.1:9000\"]"}
	}
	for _, a := range c.Addr {
		if a == "" {
			return &ConfigError{Field: "addr", Reason: "empty address in the list"}
		}
	}
	if !identifierRE.MatchString(c.Database) {
		return &ConfigError{Field: "database", Reason: fmt.Sprintf("%q is not a plain identifier (letters, digits, _; not starting with a digit)", c.Database)}
	}
	if c.TablePrefix != "" && !identifierRE.MatchString(c.TablePrefix) {
		return &ConfigError{Field: "table_prefix", Reason: fmt.Sprintf("%q is not a plain identifier (letters, digits, _; not starting with a digit)", c.TablePrefix)}
	}
	if c.Cluster != "" && !identifierRE.MatchString(c.Cluster) {
		return &ConfigError{Field: "cluster", Reason: fmt.Sprintf("%q is not a plain identifier; name a cluster of the servers' remote_servers", c.Cluster)}
	}
	if c.DialTimeout < 0 || c.InsertTimeout < 0 || c.MaxElapsed < 0 || c.MaxOpenConns < 0 {
		return &ConfigError{Field: "timeouts", Reason: "negative timeout or connection count"}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Username == "" {
		c.Username = "default"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.InsertTimeout == 0 {
		c.InsertTimeout = 2 * time.Minute
	}
	if c.MaxElapsed == 0 {
		c.MaxElapsed = 2 * time.Minute
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = 4
	}
	if c.ZookeeperPath == "" {
		c.ZookeeperPath = DefaultZookeeperPath
	}
	return c
}

// Client is one pool of connections to one ClickHouse database, and the
// ports the rest of fleetsync reaches it by. It serves no port itself: each
// port is a type of that port's size over the same pool (Points,
// AnalystTables, Metadata, Readback, Schema, Marks), so that a reader finds a
// port's code in its own files and a test double stands in for one port, not
// for all of them. Client keeps the lifecycle (Open, Ping, Close) and the few
// statements the state package still writes by hand (Conn, Table, Retry,
// NextVersion, InsertRows; see state/lease.go). It is safe for concurrent
// use; concurrent inserts run on separate pooled connections, which lets the
// server write one part while the next INSERT streams in.
type Client struct {
	*pool
}

// Open validates cfg and prepares a connection pool. It does not contact the
// server (see Ping), so a daemon can start while ClickHouse is still coming
// up. An invalid cfg yields a *ConfigError.
func Open(ctx context.Context, cfg Config, logger *zap.Logger, reg prometheus.Registerer) (*Client, error) {
	_ = ctx // reserved: opening is lazy today
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = zap.NewNop()
	}
	comp, err := compression(cfg.Compression, cfg.Addr)
	if err != nil {
		return nil, err
	}
	c := &pool{cfg: cfg}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:         cfg.Addr,
		Auth:         clickhouse.Auth{Username: cfg.Username, Password: cfg.Password},
		Compression:  comp,
		TLS:          noteCertRequests(cfg.TLS, &c.certAsked),
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.InsertTimeout,
		MaxOpenConns: cfg.MaxOpenConns,
		MaxIdleConns: cfg.MaxOpenConns,
		// Column buffers are the bulk of the memory; keep them per
		// connection between batches rather than regrowing them.
		FreeBufOnConnRelease: false,
		Settings:             clusterSettings(cfg),
	})
	if err != nil {
		// clickhouse.Open only fails on option errors; they never carry the password.
		return nil, &ConfigError{Field: "addr", Reason: err.Error()}
	}
	m, err := newMetrics(reg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.conn, c.log, c.metrics = guardedConn{conn}, logger.With(zap.Strings("clickhouse_addr", cfg.Addr), zap.String("database", cfg.Database)), m
	c.insertPointsSQL = "INSERT INTO " + c.table(TableDatapoints) + " (" + pointColumnList + c.cluster().keyColumn() + ")"
	return &Client{pool: c}, nil
}

// Close releases the connection pool.
func (c *Client) Close() error { return c.conn.Close() }

// Ping checks that the server answers.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.conn.Ping(ctx); err != nil {
		if te := tlsFailure(err, c.cfg.Addr, c.cfg.TLS != nil, c.certAsked.Load()); te != nil {
			return te
		}
		return fmt.Errorf("ping clickhouse %v: %w", c.cfg.Addr, err)
	}
	return nil
}

// Points is the points writer: the pipeline's Writer (write.go).
func (c *Client) Points() *Points { return &Points{c.pool} }

// AnalystTables are the tables built from the points for analysts, kept by
// the commit chain's analyst link (load/analyst) and rebuilt, checked and repaired by hand
// (rollup.go, rebuild.go, rollup_check.go).
func (c *Client) AnalystTables() *AnalystTables { return &AnalystTables{c.pool} }

// Metadata is the store of the fleet's devices, variables, organizations,
// groups and event logs: pipeline/metadata's RefreshStore and
// EventLogWriter (metadata.go, fleet.go).
func (c *Client) Metadata() *Metadata { return &Metadata{c.pool} }

// Readback reads back what landed, for verify (its Warehouse) and status
// (read.go).
func (c *Client) Readback() *Readback { return &Readback{c.pool} }

// Schema creates and upgrades the tables, on one server or a cluster
// (schema.go, cluster.go).
func (c *Client) Schema() *Schema { return &Schema{c.pool} }

// Marks is the store of the variables' marks and the settled watermark
// (marks.go), beside the DDL of their tables.
func (c *Client) Marks() *Marks { return &Marks{c.pool} }

// Conn is the underlying clickhouse-go connection pool, for tests and for
// the state package's lease and event marks.
func (c *Client) Conn() driver.Conn { return c.conn }

// Database is the configured database name.
func (c *Client) Database() string { return c.cfg.Database }

// Table is the fully qualified, back-quoted name of one of fleetsync's
// tables (name is one of the Table* constants), prefix applied.
func (c *Client) Table(name string) string { return c.table(name) }

// NextVersion returns a row version for ReplacingMergeTree: the wall clock
// in nanoseconds, forced strictly above every version this client returned
// before, so a later write of the same key always replaces an earlier one.
func (c *Client) NextVersion() uint64 { return c.nextVersion() }

// Retry runs op until it succeeds or fails for good, as every port's
// statements do (see retry in retry.go). table labels the metrics and log
// lines.
func (c *Client) Retry(ctx context.Context, table string, op func(ctx context.Context) error) error {
	return c.retry(ctx, table, op)
}

// InsertRows appends n rows, row(i) giving the values of row i in the order
// of columns, as one INSERT into table, retried as a whole (see insertRows
// in pool.go).
func (c *Client) InsertRows(ctx context.Context, table, columns string, n int, row func(i int) []any) error {
	return c.insertRows(ctx, table, columns, n, row)
}
