package config

// Example returns a complete, commented configuration file: every key with
// its default, except source.base_url and source.token_file, which have no
// default and show sample values. It parses as is (a test keeps it so), and
// it is what the README shows and what `fleetsync` prints for a new setup.
func Example() string { return example }

const example = `# fleetsync configuration.
#
# Every key below shows its default; a key left out, or left empty, keeps it.
# Every key may be overridden by an environment variable FLEETSYNC_<SECTION>_<KEY>
# in upper case, e.g. FLEETSYNC_SOURCE_TOKEN or FLEETSYNC_SYNC_LOOKBACK=2h; lists
# are comma-separated (FLEETSYNC_CLICKHOUSE_ADDR=ch1:9000,ch2:9000).
# Durations are Go durations (300ms, 90s, 1h30m) plus d for days (730d, 1d12h).
# Unknown keys and unknown FLEETSYNC_ variables are errors.

source:
  # The Fleet Telemetry Service root; the API paths /api/v2.0 and /api/v1.6
  # hang below it. Required. No credentials and no query string in it.
  base_url: http://127.0.0.1:8080
  # A file holding the API token, re-read before each cycle and after every
  # 401, so a rotated token is picked up. Set exactly one of token_file, token.
  # A {shard} in the path becomes sync.shard_index: a token (and so a rate
  # limit) per shard, e.g. /run/secrets/fleet-token-{shard}.
  token_file: /run/secrets/fleet-token
  # The API token itself (or FLEETSYNC_SOURCE_TOKEN). Never logged.
  token: ""
  # The account's data-retention window; no request reaches further back.
  retention: 730d
  # Added to the retention floor (now - retention), so that no request is
  # rejected for reaching past retention. Must be shorter than retention.
  retention_margin: 1h
  # The longest one HTTP request may take.
  timeout: 30s
  # How long a request failing with a network error, 5xx or 429 is retried.
  retry_max_elapsed: 2m
  # A hard cap on the requests per second to the service, all workers
  # together; 0 is none. Below it, fleetsync learns the service's per-token
  # limit from its 429s by itself.
  requests_per_second: 0
  # Where a run starts when the state store keeps no rate learned from this
  # token's 429s (the first run; later runs start from the learned one). It
  # grows within seconds while the service admits it, so a plan with a
  # higher limit or none costs a few seconds once; 0 starts unlimited. 4 is
  # what the hosted service documents per token.
  initial_requests_per_second: 4
  # Page size of the Platform API listings (devices, variables), 1 to 1000.
  # Every cycle lists them all, so at a per-token rate limit the page count
  # is the cycle's cost. The spec gives no maximum: a service that clamps a
  # large page_size is followed page by page, and one that rejects it (HTTP
  # 400) is listed with its documented default, 50, instead.
  page_size: 1000
  # How variables are listed: auto reads the account-wide list (a few pages)
  # when every variable in it names a listed device, and each device's list
  # otherwise; per_device always reads each device's list (one request per
  # device and cycle).
  variables_listing: auto
  # A PEM file of extra CAs trusted for base_url, beside the system's (a
  # private CA, or a proxy that inspects TLS). HTTPS_PROXY and NO_PROXY are
  # honoured for an https base_url; HTTP_PROXY is not (it would see the token).
  ca_file: ""

sync:
  # When "fleetsync run" starts a cycle: a cron expression of five fields, or
  # a descriptor such as @hourly or "@every 10m". "fleetsync sync" ignores it.
  schedule: "*/5 * * * *"
  # How far behind each high-water mark a variable's re-read starts, for late
  # points (once per idle_recheck; the cycles between read after the mark).
  lookback: 1h
  # The raw-series limit per variable; a frame that returns this many rows
  # may have been cut and is re-read in smaller windows.
  rows_per_request: 10000
  # Variables asked for in one raw-series request, 1 to 1000.
  variables_per_request: 50
  # API requests in flight at once, 1 to 64.
  max_in_flight: 4
  # An insert is committed when it holds batch_rows rows or about
  # batch_bytes bytes, or is batch_age old. Rows stream into the open
  # insert chunk by chunk, so these size the inserts (bigger ones make
  # fewer parts for ClickHouse to merge), not fleetsync's memory.
  batch_rows: 1000000
  batch_bytes: 134217728
  batch_age: 5s
  # ClickHouse inserts in flight at once, 1 to 16.
  insert_workers: 2
  # Each variable's window from mark - lookback is re-read every
  # idle_recheck; in between a cycle reads only the points after its mark,
  # and with skip_idle only when its lastActivity moved. lastActivity is
  # only a hint (the service may not move it for a late point): a point at
  # or after mark - lookback lands within idle_recheck plus one schedule
  # period, whatever lastActivity means, and a point after the mark in the
  # next cycle that reads the variable.
  skip_idle: true
  idle_recheck: 1h
  # How long "fleetsync run" keeps its listing of device groups, their
  # members and organizations before listing them again (devices and
  # variables are walked every cycle). Group, membership and organization
  # changes reach the tables within this plus one schedule period; a new
  # device's organization may wait as long. 0 lists them every cycle; a
  # new process ("fleetsync sync") lists them on its first cycle.
  metadata_refresh: 1h
  # Keep the analyst tables (datapoints_latest, datapoints_hourly) exact in
  # every cycle. Recomputing them costs ClickHouse about as much as loading
  # the points again during a large backfill (an incremental cycle: ~10 %);
  # with false, run "fleetsync rollup --from T --to T" over what was loaded.
  rollups: true
  # Split the variables among shard_count instances; this one is number
  # shard_index, counted from 0. Leave shard_index out in an Indexed Job:
  # it is then taken from JOB_COMPLETION_INDEX. Shards run in parallel, each
  # under its own lease; shard 0 alone refreshes the metadata tables.
  shard_index: 0
  shard_count: 1
  # How long a cycle's lease lasts without renewal; it keeps two instances
  # from syncing the same variables at once.
  lease_ttl: 2m
  # Restrict the sync to these devices (ids or ~labels), device groups and
  # organizations (ids or ~labels) and device tags. A device is in scope when
  # any entry selects it (the lists are a union). Empty restricts nothing.
  devices: []
  device_groups: []
  organizations: []
  device_tags: []
  # Events (ids or ~labels) whose logs are synced too. Empty: none.
  events: []

clickhouse:
  # Servers, native protocol (usually port 9000, not the HTTP port 8123).
  addr: ["127.0.0.1:9000"]
  # The database holding the tables; "fleetsync migrate" creates them.
  database: fleet
  username: default
  # The password (or FLEETSYNC_CLICKHOUSE_PASSWORD), or a file holding it;
  # at most one of the two. Never logged.
  password: ""
  password_file: ""
  # Prepended to every table name, e.g. fs_ gives fs_datapoints.
  table_prefix: ""
  # The longest opening a connection and one insert may take.
  dial_timeout: 5s
  insert_timeout: 2m
  # How long a failing insert is retried.
  retry_max_elapsed: 1m
  # How inserted data travel: auto (lz4 to a remote server, none to one on
  # loopback, where compressing costs more than it saves), lz4, zstd or none.
  compression: auto
  # TLS on the native protocol; ClickHouse Cloud accepts only TLS, on port
  # 9440 (addr: ["abc123.eu-west-1.aws.clickhouse.cloud:9440"]).
  tls:
    enabled: false
    # A PEM file of CAs trusted beside the system's, for a private CA.
    ca_file: ""
    # A client certificate and its key, for a server that verifies clients.
    cert_file: ""
    key_file: ""
    # The name the server's certificate carries; empty: the host of addr.
    server_name: ""
    # Accept any server certificate (a warning is logged). Never in production.
    insecure_skip_verify: false
  # A cluster of the servers' remote_servers, or empty for one server. With
  # it, every DDL runs ON CLUSTER, the tables are Replicated*MergeTree
  # "<name>_local" tables sharded by a hash of their key, and Distributed
  # tables under the usual names (datapoints, devices, ...) serve queries.
  cluster: ""
  # The ZooKeeper path prefix of the replicated tables; keep {shard} in it.
  zookeeper_path: /clickhouse/tables/{shard}

state:
  # Where the high-water marks live: clickhouse (table sync_state) or file.
  backend: clickhouse
  # The state file; required with backend file, and only then.
  path: ""

metrics:
  # Where "fleetsync run" serves /metrics, /healthz and /readyz.
  listen: ":9464"
  # When set, "fleetsync sync" pushes its metrics there before it exits,
  # e.g. http://pushgateway:9091. A user:password@ in it is never printed.
  pushgateway_url: ""
  # The Pushgateway grouping labels; an empty instance means the host name.
  job: fleetsync
  instance: ""
  # A variable whose high-water mark is further behind than this counts as lagging.
  lag_threshold: 15m

log:
  # debug, info, warn or error.
  level: info
  # auto (console on a terminal, JSON otherwise), json or console.
  format: auto
`
