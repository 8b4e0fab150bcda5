package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// leakMarker appears inside every secret value in testdata (tokens,
// passwords, URL credentials); no error message may contain it.
const leakMarker = "sekrit"

// TestBadFixturesFailWithTheirErrors loads every testdata/bad/*.yaml and
// compares the error, line by line, with the sibling .err file: each line of
// the .err file is a substring of the matching error line, and there are no
// more and no fewer error lines than expected.
func TestBadFixturesFailWithTheirErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 40 {
		t.Fatalf("found only %d bad fixtures; is the working directory the package?", len(files))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			wantText, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".err")
			if err != nil {
				t.Fatalf("every bad fixture needs a .err file: %v", err)
			}
			want := nonEmptyLines(string(wantText))
			cfg, err := Load(file, nil)
			if err == nil {
				t.Fatalf("Load succeeded, want errors:\n%s\nconfig:\n%s", strings.Join(want, "\n"), cfg.Redacted())
			}
			if cfg != nil {
				t.Errorf("Load returned a config together with an error")
			}
			got := strings.Split(err.Error(), "\n")
			for i := 0; i < max(len(got), len(want)); i++ {
				var g, w string
				if i < len(got) {
					g = got[i]
				}
				if i < len(want) {
					w = want[i]
				}
				if g == "" || w == "" || !strings.Contains(g, w) {
					t.Errorf("error line %d:\n got: %q\nwant: a line containing %q", i+1, g, w)
				}
			}
			if strings.Contains(err.Error(), leakMarker) {
				t.Errorf("error leaks a secret:\n%s", err)
			}
		})
	}
}

// TestGoodFixturesLoad loads every testdata/good/*.yaml.
func TestGoodFixturesLoad(t *testing.T) {
	files, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no good fixtures found")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			cfg, err := Load(file, nil)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("loaded config does not validate: %v", err)
			}
		})
	}
}

// TestFullFixtureSetsEveryKey makes sure every key decodes from YAML: the
// fixture gives each key a value other than its default, and each must land
// in its field. The two keys that must stay empty because their partner is
// set (token_file beside token, password beside password_file) are exempt,
// and so is clickhouse.tls.insecure_skip_verify, which a CA file excludes.
func TestFullFixtureSetsEveryKey(t *testing.T) {
	cfg, err := Load("testdata/good/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	exempt := map[string]bool{"source.token_file": true, "clickhouse.password": true, "clickhouse.tls.insecure_skip_verify": true}
	def := Default()
	for _, k := range newSchema().keys {
		if exempt[k.path] {
			continue
		}
		got, dflt := k.field(cfg).Interface(), k.field(def).Interface()
		if reflect.DeepEqual(got, dflt) {
			t.Errorf("%s = %v, still the default; full.yaml must set it", k.path, got)
		}
	}
	// Spot checks of the conversions.
	if got, want := cfg.Sync.LeaseTTL, Duration(36*60*60*1e9); got != want {
		t.Errorf("sync.lease_ttl = %s, want %s", got, want)
	}
	if got, want := cfg.Source.RequestsPerSecond, 12.5; got != want {
		t.Errorf("source.requests_per_second = %v, want %v", got, want)
	}
	if got, want := cfg.Sync.Devices, []string{"5f1c0a", "~pump-7"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sync.devices = %q, want %q", got, want)
	}
	if got, want := cfg.Source.Token.Reveal(), "tok-full-0123456789"; got != want {
		t.Errorf("source.token = %q, want %q", got, want)
	}
}

// TestYAMLShapes checks decoding rules that the good fixtures rely on.
func TestYAMLShapes(t *testing.T) {
	t.Run("null values and empty sections keep defaults", func(t *testing.T) {
		cfg := mustLoad(t, "testdata/good/nulls_keep_defaults.yaml")
		def := Default()
		if cfg.Source.Retention != def.Source.Retention || !reflect.DeepEqual(cfg.ClickHouse.Addr, def.ClickHouse.Addr) || cfg.State != def.State {
			t.Errorf("nulls changed defaults: retention %s, addr %q, state %+v", cfg.Source.Retention, cfg.ClickHouse.Addr, cfg.State)
		}
	})
	t.Run("aliases resolve", func(t *testing.T) {
		cfg := mustLoad(t, "testdata/good/anchors.yaml")
		want := []string{"~pump-1", "~pump-2"}
		if cfg.Sync.LeaseTTL != cfg.Source.Timeout || !reflect.DeepEqual(cfg.Sync.Events, want) {
			t.Errorf("lease_ttl %s (want %s), events %q (want %q)", cfg.Sync.LeaseTTL, cfg.Source.Timeout, cfg.Sync.Events, want)
		}
	})
	t.Run("a single value is a one-item list", func(t *testing.T) {
		cfg := mustLoad(t, "testdata/good/scalar_list.yaml")
		if want := []string{"clickhouse.internal:9000"}; !reflect.DeepEqual(cfg.ClickHouse.Addr, want) {
			t.Errorf("clickhouse.addr = %q, want %q", cfg.ClickHouse.Addr, want)
		}
	})
	t.Run("strings keep their text exactly", func(t *testing.T) {
		cfg, err := Parse([]byte("source:\n  base_url: http://h\n  token: 0123\nclickhouse:\n  database: _1\n  password: yes\n"), "t.yaml", nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Source.Token.Reveal() != "0123" || cfg.ClickHouse.Password.Reveal() != "yes" {
			t.Errorf("token %q, password %q; want the literal text 0123 and yes", cfg.Source.Token.Reveal(), cfg.ClickHouse.Password.Reveal())
		}
	})
}

// TestEmptyInputIsDefaults: no file content (or only comments) leaves the
// defaults, so the environment alone can configure fleetsync.
func TestEmptyInputIsDefaults(t *testing.T) {
	env := []string{"FLEETSYNC_SOURCE_BASE_URL=http://h:1", "FLEETSYNC_SOURCE_TOKEN=t"}
	for _, in := range []string{"", "# only a comment\n", "---\n", "~\n"} {
		cfg, err := Parse([]byte(in), "t.yaml", env)
		if err != nil {
			t.Errorf("Parse(%q): %v", in, err)
			continue
		}
		want := Default()
		want.Source.BaseURL, want.Source.Token = "http://h:1", "t"
		if !reflect.DeepEqual(cfg, want) {
			t.Errorf("Parse(%q) =\n%+v\nwant\n%+v", in, cfg, want)
		}
	}
}

func TestLoadNamesAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path, nil)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--config") {
		t.Fatalf("Load(missing) error = %v; want it to name %s and --config", err, path)
	}
	if !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("Load(missing) error does not wrap the fs.ErrNotExist: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

func mustLoad(t *testing.T, path string) *Config {
	t.Helper()
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	return cfg
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
