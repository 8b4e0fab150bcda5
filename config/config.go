// Package config holds fleetsync's configuration: its keys and defaults, the
// strict YAML loader, the FLEETSYNC_<SECTION>_<KEY> environment overrides and
// the validation that reports every problem at once.
//
// The order is fixed: Default, then the YAML file (an unknown key is an
// error), then the environment (an unknown FLEETSYNC_ variable is an error),
// then Validate. Load and Parse do all four and return a usable Config or an
// error listing every problem, one per line, each naming the key and the fix.
//
// Secrets (source.token, clickhouse.password, the credentials of
// metrics.pushgateway_url) have types that redact themselves whenever they
// are printed or marshalled, so a Config may be logged as a whole.
package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// State backends accepted by state.backend.
const (
	// BackendClickHouse keeps high-water marks in the sync_state table.
	BackendClickHouse = "clickhouse"
	// BackendFile keeps high-water marks in the file at state.path.
	BackendFile = "file"
)

// Config is the whole fleetsync configuration. Each field is one YAML
// section; the yaml tags are the contract's key names.
type Config struct {
	Source     SourceConfig     `yaml:"source" json:"source"`
	Sync       SyncConfig       `yaml:"sync" json:"sync"`
	ClickHouse ClickHouseConfig `yaml:"clickhouse" json:"clickhouse"`
	State      StateConfig      `yaml:"state" json:"state"`
	Metrics    MetricsConfig    `yaml:"metrics" json:"metrics"`
	Log        LogConfig        `yaml:"log" json:"log"`
}

// SourceConfig says how to reach the Fleet Telemetry Service.
type SourceConfig struct {
	// BaseURL is the service root; /api/v2.0 and /api/v1.6 hang below it.
	BaseURL string `yaml:"base_url" json:"base_url"`
	// TokenFile holds the API token; the client re-reads it before each cycle
	// and after every 401. Exactly one of TokenFile and Token is set.
	TokenFile string `yaml:"token_file" json:"token_file"`
	// Token is the API token itself.
	Token Secret `yaml:"token" json:"token"`
	// Retention is the account's data-retention window.
	Retention Duration `yaml:"retention" json:"retention"`
	// RetentionMargin is added to the retention floor (now - Retention) so
	// that no request reaches past retention while it is in flight.
	RetentionMargin Duration `yaml:"retention_margin" json:"retention_margin"`
	// Timeout bounds one HTTP request.
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// RetryMaxElapsed is how long a retryable failure is retried.
	RetryMaxElapsed Duration `yaml:"retry_max_elapsed" json:"retry_max_elapsed"`
	// RequestsPerSecond caps the request rate; 0 means no cap. Below the
	// cap the client learns the service's limit from its 429s.
	RequestsPerSecond float64 `yaml:"requests_per_second" json:"requests_per_second"`
	// InitialRequestsPerSecond is where a run starts when the state store
	// keeps no rate learned for its token: the rate grows while the
	// service admits it, until a 429 teaches the limit. 0 starts
	// unlimited (below RequestsPerSecond).
	InitialRequestsPerSecond float64 `yaml:"initial_requests_per_second" json:"initial_requests_per_second"`
	// PageSize is the page_size of Platform API listings.
	PageSize int `yaml:"page_size" json:"page_size"`
	// VariablesListing says how the metadata walk lists variables:
	// VariablesAuto reads the account-wide list (a few pages) when every
	// variable in it names a listed device, else each device's list;
	// VariablesPerDevice always reads each device's list (one request each).
	VariablesListing string `yaml:"variables_listing" json:"variables_listing"`
	// CAFile is a PEM file of extra CAs trusted for base_url, beside the
	// system's.
	CAFile string `yaml:"ca_file" json:"ca_file"`
}

// The values of source.variables_listing.
const (
	VariablesAuto      = "auto"
	VariablesPerDevice = "per_device"
)

// SyncConfig shapes the sync cycle: when it runs, what it reads and how much
// it keeps in flight.
type SyncConfig struct {
	// Schedule is the daemon's cron expression (five fields or a descriptor).
	Schedule string `yaml:"schedule" json:"schedule"`
	// Lookback is how far behind each high-water mark a cycle re-reads.
	Lookback Duration `yaml:"lookback" json:"lookback"`
	// RowsPerRequest is the raw-series limit per variable.
	RowsPerRequest int `yaml:"rows_per_request" json:"rows_per_request"`
	// VariablesPerRequest is how many variables one raw-series request asks for.
	VariablesPerRequest int `yaml:"variables_per_request" json:"variables_per_request"`
	// MaxInFlight bounds concurrent API requests.
	MaxInFlight int `yaml:"max_in_flight" json:"max_in_flight"`
	// BatchRows, BatchBytes and BatchAge decide when an insert batch is
	// sent: whichever limit is reached first.
	BatchRows  int      `yaml:"batch_rows" json:"batch_rows"`
	BatchBytes int      `yaml:"batch_bytes" json:"batch_bytes"`
	BatchAge   Duration `yaml:"batch_age" json:"batch_age"`
	// InsertWorkers bounds concurrent ClickHouse inserts.
	InsertWorkers int `yaml:"insert_workers" json:"insert_workers"`
	// SkipIdle lets a cycle skip, between re-reads (IdleRecheck), a
	// variable whose lastActivity has not changed since its last read.
	// lastActivity is only a hint: the spec does not say which writes move
	// it.
	SkipIdle bool `yaml:"skip_idle" json:"skip_idle"`
	// Rollups keeps datapoints_latest and datapoints_hourly exact in every
	// cycle, backfill and repair. Off, a large first backfill loads about a
	// third faster; `fleetsync rollup` then rebuilds the range it loaded.
	Rollups bool `yaml:"rollups" json:"rollups"`
	// IdleRecheck is how often each variable's window from mark - lookback
	// is re-read, whatever lastActivity says; in between a cycle reads the
	// points after its mark alone, so a late point waits for the re-read.
	IdleRecheck Duration `yaml:"idle_recheck" json:"idle_recheck"`
	// MetadataRefresh is how long a daemon keeps its listing of device
	// groups, their members and organizations before it lists them again:
	// in a steady state those lists cost more requests than the device and
	// variable pages a cycle must read, and they seldom change. 0 lists
	// them every cycle. A new process (a CronJob's run) lists them on its
	// first cycle.
	MetadataRefresh Duration `yaml:"metadata_refresh" json:"metadata_refresh"`
	// ShardIndex and ShardCount split the variables among instances.
	ShardIndex int `yaml:"shard_index" json:"shard_index"`
	ShardCount int `yaml:"shard_count" json:"shard_count"`
	// LeaseTTL is how long a cycle's lease lasts without renewal.
	LeaseTTL Duration `yaml:"lease_ttl" json:"lease_ttl"`
	// Devices, DeviceGroups, Organizations and DeviceTags restrict the scope;
	// entries are ids or ~labels (tags are plain). Empty restricts nothing.
	Devices       []string `yaml:"devices" json:"devices"`
	DeviceGroups  []string `yaml:"device_groups" json:"device_groups"`
	Organizations []string `yaml:"organizations" json:"organizations"`
	DeviceTags    []string `yaml:"device_tags" json:"device_tags"`
	// Events are the events (ids or ~labels) whose logs are synced.
	Events []string `yaml:"events" json:"events"`
}

// ClickHouseConfig says how to reach the warehouse.
type ClickHouseConfig struct {
	// Addr lists host:port addresses of the native protocol.
	Addr     []string `yaml:"addr" json:"addr"`
	Database string   `yaml:"database" json:"database"`
	Username string   `yaml:"username" json:"username"`
	Password Secret   `yaml:"password" json:"password"`
	// PasswordFile holds the password; at most one of Password and
	// PasswordFile is set.
	PasswordFile string `yaml:"password_file" json:"password_file"`
	// TablePrefix is prepended to every table name.
	TablePrefix     string   `yaml:"table_prefix" json:"table_prefix"`
	DialTimeout     Duration `yaml:"dial_timeout" json:"dial_timeout"`
	InsertTimeout   Duration `yaml:"insert_timeout" json:"insert_timeout"`
	RetryMaxElapsed Duration `yaml:"retry_max_elapsed" json:"retry_max_elapsed"`
	// Compression is how INSERT data travel: CompressionAuto, or lz4, zstd, none.
	Compression string `yaml:"compression" json:"compression"`
	// TLS secures the native protocol (ClickHouse Cloud: port 9440).
	TLS TLSConfig `yaml:"tls" json:"tls"`
	// Cluster names a cluster of the servers' remote_servers: DDL runs ON
	// CLUSTER, tables are Replicated locals under Distributed tables of the
	// contract's names. Empty means one server.
	Cluster string `yaml:"cluster" json:"cluster"`
	// ZookeeperPath prefixes the ZooKeeper path of every replicated table;
	// it holds the {shard} macro so each shard replicates apart.
	ZookeeperPath string `yaml:"zookeeper_path" json:"zookeeper_path"`
}

// StateConfig says where high-water marks are kept.
type StateConfig struct {
	// Backend is BackendClickHouse or BackendFile.
	Backend string `yaml:"backend" json:"backend"`
	// Path is the state file; required with BackendFile only.
	Path string `yaml:"path" json:"path"`
}

// MetricsConfig says where metrics are served and pushed.
type MetricsConfig struct {
	// Listen is the address of /metrics, /healthz and /readyz.
	Listen string `yaml:"listen" json:"listen"`
	// PushgatewayURL, when set, is where `fleetsync sync` pushes its metrics.
	PushgatewayURL SecretURL `yaml:"pushgateway_url" json:"pushgateway_url"`
	// Job and Instance are the Pushgateway grouping labels; an empty Instance
	// means the host name (resolved by the caller, not here).
	Job          string   `yaml:"job" json:"job"`
	Instance     string   `yaml:"instance" json:"instance"`
	LagThreshold Duration `yaml:"lag_threshold" json:"lag_threshold"`
}

// LogConfig chooses the log level and encoding.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level" json:"level"`
	// Format is auto (console on a terminal, JSON otherwise), json or console.
	Format string `yaml:"format" json:"format"`
}

// Default returns the configuration every file starts from. It is not valid
// on its own: source.base_url and one of source.token_file and source.token
// have no default.
func Default() *Config {
	return &Config{
		Source: SourceConfig{
			Retention:         Duration(730 * day),
			RetentionMargin:   Duration(time.Hour),
			Timeout:           Duration(30 * time.Second),
			RetryMaxElapsed:   Duration(2 * time.Minute),
			RequestsPerSecond: 0,
			// What the hosted service documents per token.
			InitialRequestsPerSecond: 4,
			PageSize:                 1000,
			VariablesListing:         VariablesAuto,
		},
		Sync: SyncConfig{
			Schedule:            "*/5 * * * *",
			Lookback:            Duration(time.Hour),
			RowsPerRequest:      10000,
			VariablesPerRequest: 50,
			MaxInFlight:         4,
			BatchRows:           1000000,
			BatchBytes:          128 << 20,
			BatchAge:            Duration(5 * time.Second),
			InsertWorkers:       2,
			SkipIdle:            true,
			Rollups:             true,
			IdleRecheck:         Duration(time.Hour),
			MetadataRefresh:     Duration(time.Hour),
			ShardIndex:          0,
			ShardCount:          1,
			LeaseTTL:            Duration(2 * time.Minute),
		},
		ClickHouse: ClickHouseConfig{
			Addr:            []string{"127.0.0.1:9000"},
			Database:        "fleet",
			Username:        "default",
			DialTimeout:     Duration(5 * time.Second),
			InsertTimeout:   Duration(2 * time.Minute),
			RetryMaxElapsed: Duration(time.Minute),
			Compression:     CompressionAuto,
			ZookeeperPath:   "/clickhouse/tables/{shard}",
		},
		State: StateConfig{Backend: BackendClickHouse},
		Metrics: MetricsConfig{
			Listen:       ":9464",
			Job:          "fleetsync",
			LagThreshold: Duration(15 * time.Minute),
		},
		Log: LogConfig{Level: "info", Format: "auto"},
	}
}

// Redacted returns the configuration as YAML with every secret replaced by
// "<redacted>", for `fleetsync` to print and for debug logs.
func (c *Config) Redacted() string {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		// Only a type the encoder cannot handle gets here, which a test
		// rules out; say so rather than print a half document.
		return fmt.Sprintf("# configuration not printable: %v\n", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Sprintf("# configuration not printable: %v\n", err)
	}
	return b.String()
}
