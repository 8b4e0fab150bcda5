package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// valid returns a configuration that passes Validate.
func valid() *Config {
	c := Default()
	c.Source.BaseURL = "http://127.0.0.1:8080"
	c.Source.TokenFile = "/run/secrets/fleet-token"
	return c
}

func TestDefaultLacksOnlyTheSourceAndToken(t *testing.T) {
	err := Default().Validate()
	want := []string{
		"source.base_url: required; set it to the service URL, e.g. https://telemetry.example.com",
		"source.token_file: required (or source.token); set it to a file holding the API token, e.g. /run/secrets/fleet-token",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("Default().Validate() =\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
	if err := valid().Validate(); err != nil {
		t.Errorf("valid().Validate() = %v", err)
	}
}

// TestValidateAcceptsEdgeValues: the limits themselves are allowed.
func TestValidateAcceptsEdgeValues(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
	}{
		{"lookback zero", func(c *Config) { c.Sync.Lookback = 0 }},
		{"lookback just under retention", func(c *Config) { c.Sync.Lookback = c.Source.Retention - 1 }},
		{"retention margin zero", func(c *Config) { c.Source.RetentionMargin = 0 }},
		{"unlimited request rate", func(c *Config) { c.Source.RequestsPerSecond = 0 }},
		{"fractional request rate", func(c *Config) { c.Source.RequestsPerSecond = 0.5 }},
		{"page size 1000", func(c *Config) { c.Source.PageSize = 1000 }},
		{"page size 1", func(c *Config) { c.Source.PageSize = 1 }},
		{"variables per request 1000", func(c *Config) { c.Sync.VariablesPerRequest = 1000 }},
		{"max in flight 64", func(c *Config) { c.Sync.MaxInFlight = 64 }},
		{"insert workers 16", func(c *Config) { c.Sync.InsertWorkers = 16 }},
		{"rows per request 1", func(c *Config) { c.Sync.RowsPerRequest = 1 }},
		{"last shard", func(c *Config) { c.Sync.ShardCount, c.Sync.ShardIndex = 4, 3 }},
		{"inline token", func(c *Config) { c.Source.TokenFile, c.Source.Token = "", "tok" }},
		{"base url with path prefix", func(c *Config) { c.Source.BaseURL = "https://gw.example.com/fleet/" }},
		{"base url https with port", func(c *Config) { c.Source.BaseURL = "https://telemetry.example.com:8443" }},
		{"schedule descriptor", func(c *Config) { c.Sync.Schedule = "@hourly" }},
		{"schedule every", func(c *Config) { c.Sync.Schedule = "@every 90s" }},
		{"schedule with time zone", func(c *Config) { c.Sync.Schedule = "TZ=UTC 0 3 * * *" }},
		{"ipv6 addresses", func(c *Config) { c.ClickHouse.Addr = []string{"[::1]:9000", "[fe80::1%eth0]:9440"} }},
		{"password file only", func(c *Config) { c.ClickHouse.PasswordFile = "/run/secrets/ch" }},
		{"table prefix", func(c *Config) { c.ClickHouse.TablePrefix = "fs_" }},
		{"file state", func(c *Config) { c.State = StateConfig{Backend: BackendFile, Path: "state.json"} }},
		{"listen on a free port", func(c *Config) { c.Metrics.Listen = "127.0.0.1:0" }},
		{"pushgateway with credentials", func(c *Config) { c.Metrics.PushgatewayURL = "https://u:p@push.example.com:9091/x" }},
		{"scope lists", func(c *Config) {
			c.Sync.Devices = []string{"5f1c0a", "~pump-7"}
			c.Sync.DeviceTags = []string{"outdoor"}
			c.Sync.Events = []string{"~overheat"}
		}},
		{"every log level and format", func(c *Config) { c.Log = LogConfig{Level: "debug", Format: "console"} }},
	}
	for _, tt := range tests {
		c := valid()
		tt.edit(c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestValidateReportsEveryProblemAtOnce breaks one key per section and
// expects one error per broken key, each on its own line and each an
// independent error that errors.Join kept.
func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	c := valid()
	c.Source.PageSize = 0
	c.Sync.Lookback = Duration(-time.Hour)
	c.ClickHouse.Database = "a-b"
	c.State.Backend = "zk"
	c.Metrics.Listen = "nope"
	c.Log.Format = "xml"
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want 6 problems")
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Validate() error %T is not an errors.Join", err)
	}
	keys := []string{"source.page_size", "sync.lookback", "clickhouse.database", "state.backend", "metrics.listen", "log.format"}
	errs := joined.Unwrap()
	if len(errs) != len(keys) {
		t.Fatalf("%d problems, want %d:\n%v", len(errs), len(keys), err)
	}
	for i, e := range errs {
		if !strings.HasPrefix(e.Error(), keys[i]+": ") || strings.Contains(e.Error(), "\n") {
			t.Errorf("problem %d = %q, want one line starting with %q", i+1, e, keys[i]+": ")
		}
	}
}

// TestValidationNeverEchoesSecrets sets every secret to a marked value and
// breaks the keys whose messages could quote them.
func TestValidationNeverEchoesSecrets(t *testing.T) {
	cases := []func(c *Config){
		func(c *Config) { c.Source.Token = "tok-sekrit\n" }, // whitespace, and both token and token_file
		func(c *Config) { c.Source.BaseURL = "https://u:sekrit@h/?token=sekrit#sekrit" },
		func(c *Config) { c.Source.BaseURL = "https://h/%zzsekrit" },
		func(c *Config) { c.Source.BaseURL = "ftp://sekrit@h" },
		func(c *Config) { c.ClickHouse.Password, c.ClickHouse.PasswordFile = "sekrit", "/p" },
		func(c *Config) { c.Metrics.PushgatewayURL = "https://u:sekrit@h/?t=sekrit" },
		func(c *Config) { c.Metrics.PushgatewayURL = "https://u:sekrit%zz@h/" },
		func(c *Config) { c.Metrics.PushgatewayURL = "ftp://u:sekrit@h/" },
		func(c *Config) { c.Metrics.PushgatewayURL = "https://u:sekrit@h:99999/" },
	}
	for i, edit := range cases {
		c := valid()
		edit(c)
		err := c.Validate()
		if err == nil {
			t.Errorf("case %d: Validate() = nil, want an error", i)
			continue
		}
		if strings.Contains(err.Error(), "sekrit") {
			t.Errorf("case %d: error echoes a secret: %v", i, err)
		}
		// base_url is a plain string (Validate refuses credentials in it, so
		// no loaded config holds any); every other field must hide them.
		c.Source.BaseURL = ""
		if s := fmt.Sprintf("%+v %v %#v", c, c, c); strings.Contains(s, "sekrit") {
			t.Errorf("case %d: printing the config echoes a secret: %s", i, s)
		}
	}
}

func TestValidateRejectsNilConfig(t *testing.T) {
	var c *Config
	if err := c.Validate(); err == nil {
		t.Error("nil Config validated")
	}
}
