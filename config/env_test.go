package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// base is the least valid file, for tests that vary the environment.
const base = "source:\n  base_url: http://127.0.0.1:8080\n  token_file: /run/secrets/fleet-token\n"

func TestEnvOverridesFileAndDefaults(t *testing.T) {
	file := base + "sync:\n  lookback: 2h\n  devices: [a, b]\n"
	tests := []struct {
		name  string
		env   []string
		check func(c *Config) (got, want any)
	}{
		{"duration with days", []string{"FLEETSYNC_SOURCE_RETENTION=365d"},
			func(c *Config) (any, any) { return c.Source.Retention, Duration(365 * day) }},
		{"env beats the file", []string{"FLEETSYNC_SYNC_LOOKBACK=3h"},
			func(c *Config) (any, any) { return c.Sync.Lookback, Duration(3 * time.Hour) }},
		{"list is comma-separated and trimmed", []string{"FLEETSYNC_CLICKHOUSE_ADDR=ch1:9000, ch2:9000,"},
			func(c *Config) (any, any) { return c.ClickHouse.Addr, []string{"ch1:9000", "ch2:9000"} }},
		{"list replaces the file's list", []string{"FLEETSYNC_SYNC_DEVICES=~pump-1"},
			func(c *Config) (any, any) { return c.Sync.Devices, []string{"~pump-1"} }},
		{"empty list value clears it", []string{"FLEETSYNC_SYNC_DEVICES="},
			func(c *Config) (any, any) { return c.Sync.Devices, []string(nil) }},
		{"int", []string{"FLEETSYNC_SYNC_ROWS_PER_REQUEST=500"},
			func(c *Config) (any, any) { return c.Sync.RowsPerRequest, 500 }},
		{"int with spaces", []string{"FLEETSYNC_SYNC_MAX_IN_FLIGHT= 8 "},
			func(c *Config) (any, any) { return c.Sync.MaxInFlight, 8 }},
		{"float", []string{"FLEETSYNC_SOURCE_REQUESTS_PER_SECOND=2.5"},
			func(c *Config) (any, any) { return c.Source.RequestsPerSecond, 2.5 }},
		{"bool", []string{"FLEETSYNC_SYNC_SKIP_IDLE=false"},
			func(c *Config) (any, any) { return c.Sync.SkipIdle, false }},
		{"bool 0", []string{"FLEETSYNC_SYNC_SKIP_IDLE=0"},
			func(c *Config) (any, any) { return c.Sync.SkipIdle, false }},
		{"secret", []string{"FLEETSYNC_CLICKHOUSE_PASSWORD=pw"},
			func(c *Config) (any, any) { return c.ClickHouse.Password.Reveal(), "pw" }},
		{"token replaces token_file when that is cleared", []string{"FLEETSYNC_SOURCE_TOKEN=tok", "FLEETSYNC_SOURCE_TOKEN_FILE="},
			func(c *Config) (any, any) {
				return [2]string{c.Source.Token.Reveal(), c.Source.TokenFile}, [2]string{"tok", ""}
			}},
		{"nested group key", []string{"FLEETSYNC_CLICKHOUSE_TLS_ENABLED=true", "FLEETSYNC_CLICKHOUSE_TLS_CA_FILE=/etc/ca.pem"},
			func(c *Config) (any, any) {
				return [2]any{c.ClickHouse.TLS.Enabled, c.ClickHouse.TLS.CAFile}, [2]any{true, "/etc/ca.pem"}
			}},
		{"later duplicate wins", []string{"FLEETSYNC_SYNC_LOOKBACK=3h", "FLEETSYNC_SYNC_LOOKBACK=4h"},
			func(c *Config) (any, any) { return c.Sync.Lookback, Duration(4 * time.Hour) }},
		{"lower case and other variables are ignored", []string{"fleetsync_sync_lookback=9h", "PATH=/bin", "FLEETSYNC", "HOME"},
			func(c *Config) (any, any) { return c.Sync.Lookback, Duration(2 * time.Hour) }},
		{"string keeps inner spaces and =", []string{"FLEETSYNC_SYNC_SCHEDULE=@every 10m", "FLEETSYNC_METRICS_INSTANCE=a=b"},
			func(c *Config) (any, any) { return c.Sync.Schedule + "|" + c.Metrics.Instance, "@every 10m|a=b" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(file), "t.yaml", tt.env)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got, want := tt.check(cfg); !reflect.DeepEqual(got, want) {
				t.Errorf("got %#v, want %#v", got, want)
			}
		})
	}
}

func TestEnvOverrideErrorsNameTheVariable(t *testing.T) {
	tests := []struct {
		env  []string
		want []string // one per error line, in order
	}{
		{[]string{"FLEETSYNC_SYNC_LOOKBAK=1h"},
			[]string{"FLEETSYNC_SYNC_LOOKBAK: no such configuration key (did you mean FLEETSYNC_SYNC_LOOKBACK?)"}},
		{[]string{"FLEETSYNC_SYNC_TOKEN=sekrit"},
			[]string{"FLEETSYNC_SYNC_TOKEN: no such configuration key (did you mean FLEETSYNC_SOURCE_TOKEN?)"}},
		{[]string{"FLEETSYNC_CONFIG=/etc/fleetsync.yaml"},
			[]string{"FLEETSYNC_CONFIG: no such configuration key; variables are FLEETSYNC_<SECTION>_<KEY>"}},
		{[]string{"FLEETSYNC_SYNC_LOOKBACK=1x"},
			[]string{`FLEETSYNC_SYNC_LOOKBACK (sync.lookback): invalid duration "1x": unknown unit "x"`}},
		{[]string{"FLEETSYNC_SOURCE_RETENTION=730"},
			[]string{`FLEETSYNC_SOURCE_RETENTION (source.retention): invalid duration "730": missing unit`}},
		{[]string{"FLEETSYNC_SYNC_ROWS_PER_REQUEST=10k"},
			[]string{`FLEETSYNC_SYNC_ROWS_PER_REQUEST (sync.rows_per_request): invalid whole number "10k"; write one like 10000`}},
		{[]string{"FLEETSYNC_SYNC_SKIP_IDLE=perhaps"},
			[]string{`FLEETSYNC_SYNC_SKIP_IDLE (sync.skip_idle): invalid boolean "perhaps"; write true or false`}},
		{[]string{"FLEETSYNC_SOURCE_REQUESTS_PER_SECOND=Inf"},
			[]string{`FLEETSYNC_SOURCE_REQUESTS_PER_SECOND (source.requests_per_second): invalid number "Inf"`}},
		{[]string{"FLEETSYNC_SYNC_BATCH_AGE="},
			[]string{"FLEETSYNC_SYNC_BATCH_AGE (sync.batch_age): empty; set a duration such as 90s, 1h30m or 730d (default 5s), or unset the variable"}},
		// Every problem at once, sorted by variable name.
		{[]string{"FLEETSYNC_SYNC_MAX_IN_FLIGHT=x", "FLEETSYNC_LOG_LEVL=debug", "FLEETSYNC_CLICKHOUSE_DIAL_TIMEOUT=5"},
			[]string{"FLEETSYNC_CLICKHOUSE_DIAL_TIMEOUT (clickhouse.dial_timeout): invalid duration",
				"FLEETSYNC_LOG_LEVL: no such configuration key (did you mean FLEETSYNC_LOG_LEVEL?)",
				"FLEETSYNC_SYNC_MAX_IN_FLIGHT (sync.max_in_flight): invalid whole number"}},
		// Values that parse but do not validate are reported by Validate.
		{[]string{"FLEETSYNC_SYNC_SHARD_INDEX=5", "FLEETSYNC_STATE_BACKEND=etcd"},
			[]string{"sync.shard_index: 5 is not below sync.shard_count (1)", `state.backend: unknown backend "etcd"`}},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(base), "t.yaml", tt.env)
		if err == nil {
			t.Errorf("env %q: no error, want %q", tt.env, tt.want)
			continue
		}
		got := strings.Split(err.Error(), "\n")
		if len(got) != len(tt.want) {
			t.Errorf("env %q: %d error lines, want %d:\n%s", tt.env, len(got), len(tt.want), err)
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tt.want[i]) {
				t.Errorf("env %q: error line %d = %q, want it to contain %q", tt.env, i+1, got[i], tt.want[i])
			}
		}
		if strings.Contains(err.Error(), "sekrit") {
			t.Errorf("env %q: error leaks a value: %s", tt.env, err)
		}
	}
}

// TestEveryKeyHasAnEnvOverride sets each key through its variable to the
// value full.yaml gives it and checks it lands, so no key is unreachable
// from the environment and names cannot collide.
func TestEveryKeyHasAnEnvOverride(t *testing.T) {
	full, err := Load("testdata/good/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newSchema()
	if len(s.byEnv) != len(s.keys) {
		t.Fatalf("%d keys but %d distinct variable names", len(s.keys), len(s.byEnv))
	}
	for _, k := range s.keys {
		v := k.field(full)
		var text string
		switch {
		case isList(v.Type()):
			text = strings.Join(v.Interface().([]string), ",")
		case v.Kind() == reflect.String:
			text = v.String() // for secrets the value itself, not "<redacted>"
		default:
			text = formatValue(v)
		}
		cfg := Default()
		if errs := applyEnv(cfg, s, []string{k.env + "=" + text}); len(errs) > 0 {
			t.Errorf("%s=%s: %v", k.env, text, errs)
			continue
		}
		if got, want := k.field(cfg).Interface(), v.Interface(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s=%s set %s to %#v, want %#v", k.env, text, k.path, got, want)
		}
	}
}
