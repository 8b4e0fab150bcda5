package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/robfig/cron/v3"
)

// identifier is what ClickHouse accepts unquoted as a database or table name,
// and therefore what we accept, so that names never need quoting.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// problems collects validation errors, one line each: "key: what is wrong;
// how to fix it".
type problems []error

// addf records one problem with key.
func (p *problems) addf(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

// Validate checks the whole configuration and returns every problem at once
// (errors.Join), each on one line naming the key and the fix. It does no I/O:
// whether token_file or password_file is readable is for the component that
// reads them. No message contains a secret.
func (c *Config) Validate() error {
	if c == nil {
		return errors.New("configuration: missing (nil)")
	}
	var p problems
	c.Source.validate(&p)
	c.Sync.validate(&p, c.Source.Retention)
	c.ClickHouse.validate(&p)
	// An INSERT stays open while its rows stream in, for up to batch_age;
	// insert_timeout bounds the whole statement, so it must be the longer.
	if c.Sync.BatchAge > 0 && c.ClickHouse.InsertTimeout > 0 && c.Sync.BatchAge >= c.ClickHouse.InsertTimeout {
		p.addf("sync.batch_age", "%s is not shorter than clickhouse.insert_timeout (%s), which bounds an insert that stays open while its rows stream in; set it to a few seconds, e.g. 5s", c.Sync.BatchAge, c.ClickHouse.InsertTimeout)
	}
	c.State.validate(&p)
	c.Metrics.validate(&p)
	c.Log.validate(&p)
	return errors.Join(p...)
}

// validate adds the source section's problems to p.
func (s *SourceConfig) validate(p *problems) {
	validateBaseURL(p, s.BaseURL)
	switch {
	case s.Token == "" && s.TokenFile == "":
		p.addf("source.token_file", "required (or source.token); set it to a file holding the API token, e.g. /run/secrets/fleet-token")
	case s.Token != "" && s.TokenFile != "":
		p.addf("source.token", "set together with source.token_file; keep exactly one (an empty FLEETSYNC_SOURCE_TOKEN_FILE or FLEETSYNC_SOURCE_TOKEN clears one)")
	}
	if s.Token != "" && strings.IndexFunc(string(s.Token), isSpaceOrControl) >= 0 {
		p.addf("source.token", "contains whitespace or control characters; set the bare token, without quotes or a trailing newline")
	}
	if s.TokenFile != "" && strings.TrimSpace(s.TokenFile) != s.TokenFile {
		p.addf("source.token_file", "%q has leading or trailing spaces; remove them", s.TokenFile)
	}
	positive(p, "source.retention", s.Retention, "the account's data-retention window, e.g. 730d")
	switch {
	case s.RetentionMargin < 0:
		p.addf("source.retention_margin", "%s is negative; set 0 or more, e.g. 1h", s.RetentionMargin)
	case s.Retention > 0 && s.RetentionMargin >= s.Retention:
		p.addf("source.retention_margin", "%s is not shorter than source.retention (%s); set a small margin such as 1h", s.RetentionMargin, s.Retention)
	}
	positive(p, "source.timeout", s.Timeout, "the time one HTTP request may take, e.g. 30s")
	positive(p, "source.retry_max_elapsed", s.RetryMaxElapsed, "how long to retry a failing request, e.g. 2m")
	if math.IsNaN(s.RequestsPerSecond) || math.IsInf(s.RequestsPerSecond, 0) || s.RequestsPerSecond < 0 {
		p.addf("source.requests_per_second", "%v is negative; set 0 (no cap) or more", s.RequestsPerSecond)
	}
	if math.IsNaN(s.InitialRequestsPerSecond) || math.IsInf(s.InitialRequestsPerSecond, 0) || s.InitialRequestsPerSecond < 0 {
		p.addf("source.initial_requests_per_second", "%v is not a rate; set 4 (the hosted service's documented rate per token), 0 (start unlimited) or more", s.InitialRequestsPerSecond)
	}
	between(p, "source.page_size", s.PageSize, 1, 1000)
	if s.VariablesListing != VariablesAuto && s.VariablesListing != VariablesPerDevice {
		p.addf("source.variables_listing", "%q is not a listing mode; set %s or %s", s.VariablesListing, VariablesAuto, VariablesPerDevice)
	}
	s.validateCAFile(p)
}

// validateBaseURL accepts only an absolute http(s) URL that carries no
// credentials: a token belongs in source.token_file, where it is never
// logged, not in a URL that ends up in logs and error messages. Messages
// never echo the URL, which may hold such a token.
func validateBaseURL(p *problems, raw string) {
	const key = "source.base_url"
	const fix = "set it to the service URL, e.g. https://telemetry.example.com"
	if raw == "" {
		p.addf(key, "required; %s", fix)
		return
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		p.addf(key, "not an absolute http or https URL; %s", fix)
		return
	}
	if u.User != nil {
		p.addf(key, "contains credentials (user:password@); remove them and put the API token in source.token_file")
	}
	if u.RawQuery != "" || u.ForceQuery {
		p.addf(key, "has a query string (?...); remove it, and put any token in source.token_file, never in the URL")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		p.addf(key, "has a fragment (#...); remove it")
	}
	path := strings.TrimSuffix(u.Path, "/")
	for _, api := range []string{"/api/v2.0", "/api/v1.6"} {
		if strings.HasSuffix(path, api) {
			p.addf(key, "ends in %s; give the service root, the client adds /api/v2.0 and /api/v1.6 itself", api)
		}
	}
	if port := u.Port(); port != "" && !validPort(port, false) {
		p.addf(key, "has an invalid port; use a number from 1 to 65535 or leave it out")
	}
}

// validate adds the sync section's problems to p; lookback is checked
// against the source's retention.
func (s *SyncConfig) validate(p *problems, retention Duration) {
	if s.Schedule == "" {
		p.addf("sync.schedule", `required; set a cron expression such as "*/5 * * * *" or a descriptor such as @hourly`)
	} else if _, err := cron.ParseStandard(s.Schedule); err != nil {
		p.addf("sync.schedule", `invalid cron expression %q (%v); use five fields such as "*/5 * * * *" or a descriptor such as @hourly or "@every 10m"`, s.Schedule, err)
	}
	switch {
	case s.Lookback < 0:
		p.addf("sync.lookback", "%s is negative; set 0 or more, e.g. 1h", s.Lookback)
	case retention > 0 && s.Lookback >= retention:
		p.addf("sync.lookback", "%s is not shorter than source.retention (%s); set it to a few hours, e.g. 1h", s.Lookback, retention)
	}
	atLeast(p, "sync.rows_per_request", s.RowsPerRequest, 1, "10000")
	between(p, "sync.variables_per_request", s.VariablesPerRequest, 1, 1000)
	between(p, "sync.max_in_flight", s.MaxInFlight, 1, 64)
	atLeast(p, "sync.batch_rows", s.BatchRows, 1, "1000000")
	atLeast(p, "sync.batch_bytes", s.BatchBytes, 1<<10, "134217728")
	positive(p, "sync.batch_age", s.BatchAge, "the longest a batch waits before it is inserted, e.g. 5s")
	between(p, "sync.insert_workers", s.InsertWorkers, 1, 16)
	atLeast(p, "sync.shard_count", s.ShardCount, 1, "1")
	switch {
	case s.ShardIndex < 0:
		p.addf("sync.shard_index", "%d is negative; number the instances from 0", s.ShardIndex)
	case s.ShardCount >= 1 && s.ShardIndex >= s.ShardCount:
		p.addf("sync.shard_index", "%d is not below sync.shard_count (%d); number the instances 0 to %d", s.ShardIndex, s.ShardCount, s.ShardCount-1)
	}
	positive(p, "sync.idle_recheck", s.IdleRecheck, "the longest an idle variable goes unread, e.g. 1h")
	if s.MetadataRefresh < 0 {
		p.addf("sync.metadata_refresh", "%s is negative; set 0 (list groups and organizations every cycle) or more, e.g. 1h", s.MetadataRefresh)
	}
	positive(p, "sync.lease_ttl", s.LeaseTTL, "how long a cycle's lease lasts, e.g. 10m")
	objectKeys(p, "sync.devices", s.Devices, "a device")
	objectKeys(p, "sync.device_groups", s.DeviceGroups, "a device group")
	objectKeys(p, "sync.organizations", s.Organizations, "an organization")
	for i, tag := range s.DeviceTags {
		if tag == "" || strings.TrimSpace(tag) != tag {
			p.addf(fmt.Sprintf("sync.device_tags[%d]", i), "%q is empty or padded with spaces; write the tag itself", tag)
		}
	}
	objectKeys(p, "sync.events", s.Events, "an event")
}

// objectKeys checks a scope list (what is "a device", "an event", ...): each
// entry an object id or "~label", as the API addresses devices, groups,
// organizations and events. A slash would change the meaning of a URL path,
// so it is refused here rather than producing a confusing 404 later.
func objectKeys(p *problems, key string, list []string, what string) {
	for i, s := range list {
		k := fmt.Sprintf("%s[%d]", key, i)
		switch {
		case s == "" || s == "~":
			p.addf(k, "%q is empty; write %s id or ~label", s, what)
		case s != strings.TrimSpace(s):
			p.addf(k, "%q is padded with spaces; write %s id or ~label without them", s, what)
		case strings.Contains(s, "/") || strings.IndexFunc(s, unicode.IsControl) >= 0:
			// Labels may hold spaces and any other text (they are escaped
			// in paths), but a slash cannot be addressed in a path at all.
			p.addf(k, "%q is not %s id or ~label (no / or control characters)", s, what)
		}
	}
}

// validate adds the clickhouse section's problems to p.
func (c *ClickHouseConfig) validate(p *problems) {
	if len(c.Addr) == 0 {
		p.addf("clickhouse.addr", `required; list at least one host:port of the native protocol, e.g. ["127.0.0.1:9000"]`)
	}
	for i, a := range c.Addr {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || !validPort(port, false) {
			p.addf(fmt.Sprintf("clickhouse.addr[%d]", i), "%q is not host:port; write it like 127.0.0.1:9000 or clickhouse.internal:9000", a)
		}
	}
	if !identifier.MatchString(c.Database) {
		p.addf("clickhouse.database", "%q is not a plain identifier; use letters, digits and _ and start with a letter or _, e.g. fleet", c.Database)
	}
	if c.Username == "" {
		p.addf("clickhouse.username", "required; set the ClickHouse user, e.g. default")
	}
	if c.Password != "" && c.PasswordFile != "" {
		p.addf("clickhouse.password", "set together with clickhouse.password_file; keep at most one")
	}
	if c.TablePrefix != "" && !identifier.MatchString(c.TablePrefix) {
		p.addf("clickhouse.table_prefix", "%q would not give plain table names; use letters, digits and _ and start with a letter or _, e.g. fs_, or leave it empty", c.TablePrefix)
	}
	positive(p, "clickhouse.dial_timeout", c.DialTimeout, "the time a connection may take to open, e.g. 5s")
	positive(p, "clickhouse.insert_timeout", c.InsertTimeout, "the time one insert may take, e.g. 2m")
	positive(p, "clickhouse.retry_max_elapsed", c.RetryMaxElapsed, "how long to retry a failing insert, e.g. 1m")
	c.validateCompressionAndTLS(p)
	c.validateCluster(p)
}

// validate adds the state section's problems to p.
func (s *StateConfig) validate(p *problems) {
	switch s.Backend {
	case BackendClickHouse:
		if s.Path != "" {
			p.addf("state.path", "only used with state.backend: file; remove it, or set state.backend to file")
		}
	case BackendFile:
		if s.Path == "" {
			p.addf("state.path", "required with state.backend: file; set the state file, e.g. /var/lib/fleetsync/state.json")
		}
	case "":
		p.addf("state.backend", "required; use clickhouse or file")
	default:
		p.addf("state.backend", "unknown backend %q; use clickhouse or file", s.Backend)
	}
}

// validate adds the metrics section's problems to p.
func (m *MetricsConfig) validate(p *problems) {
	if host, port, err := net.SplitHostPort(m.Listen); err != nil || !validPort(port, true) || strings.ContainsAny(host, " /") {
		p.addf("metrics.listen", "%q is not [host]:port; write it like :9464 or 127.0.0.1:9464", m.Listen)
	}
	if m.PushgatewayURL != "" {
		// Never echo the value: it may carry a password.
		u, err := url.Parse(m.PushgatewayURL.Reveal())
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
			p.addf("metrics.pushgateway_url", "not an absolute http or https URL; set it like http://pushgateway:9091, or empty to not push")
		case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
			p.addf("metrics.pushgateway_url", "has a query or fragment; give only scheme, optional user:password@, host and path, e.g. http://pushgateway:9091")
		case u.Port() != "" && !validPort(u.Port(), false):
			p.addf("metrics.pushgateway_url", "has an invalid port; use a number from 1 to 65535, e.g. http://pushgateway:9091")
		}
	}
	if m.Job == "" {
		p.addf("metrics.job", "required; set the Pushgateway job label, e.g. fleetsync")
	}
	positive(p, "metrics.lag_threshold", m.LagThreshold, "the lag from which a variable counts as behind, e.g. 15m")
}

// validate adds the log section's problems to p.
func (l *LogConfig) validate(p *problems) {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		p.addf("log.level", "unknown level %q; use debug, info, warn or error", l.Level)
	}
	switch l.Format {
	case "auto", "json", "console":
	default:
		p.addf("log.format", "unknown format %q; use auto, json or console", l.Format)
	}
}

// positive requires d > 0; fix says what the key is, with an example value.
func positive(p *problems, key string, d Duration, fix string) {
	if d <= 0 {
		p.addf(key, "%s is not positive; set %s", d, fix)
	}
}

// between requires lo <= n <= hi.
func between(p *problems, key string, n, lo, hi int) {
	if n < lo || n > hi {
		p.addf(key, "%d is out of range; set a value from %d to %d", n, lo, hi)
	}
}

// atLeast requires n >= lo; example is a sensible value to suggest.
func atLeast(p *problems, key string, n, lo int, example string) {
	if n < lo {
		p.addf(key, "%d is below %d; set it to e.g. %s", n, lo, example)
	}
}

// validPort accepts a decimal TCP port from 1 to 65535, or 0 when allowZero
// (a listener on a free port, as tests use).
func validPort(port string, allowZero bool) bool {
	if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return false
	}
	n, _ := strconv.Atoi(port)
	return n <= 65535 && (n > 0 || allowZero)
}

// isSpaceOrControl reports characters that never belong in a token, an id or
// a label used in a URL path.
func isSpaceOrControl(r rune) bool {
	return r <= ' ' || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0xa0 || r == 0xfeff || r == '\u2028' || r == '\u2029'
}
