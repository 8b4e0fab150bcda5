package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: no input panics; Parse returns a config or an error, never
// both or neither; a returned config validates and prints; every error line
// is non-empty.
func FuzzParse(f *testing.F) {
	f.Add([]byte(Example()))
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("source: &s {base_url: *s}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		env := []string{"FLEETSYNC_SOURCE_BASE_URL=http://h", "FLEETSYNC_SOURCE_TOKEN=t"}
		cfg, err := Parse(data, "fuzz.yaml", env)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v", cfg != nil, err)
		}
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.TrimSpace(line) == "" {
					t.Fatalf("empty error line in %q", err)
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse returned a config that does not validate: %v", err)
		}
		_ = cfg.Redacted()
	})
}
