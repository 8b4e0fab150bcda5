package config

import (
	"path/filepath"
	"testing"
)

// The configurations shipped in deploy/ must load with the real loader, so a
// key renamed here cannot silently break a deployment.
func TestShippedDeployConfigsLoad(t *testing.T) {
	paths, err := filepath.Glob("../deploy/*/config.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no deploy/*/config.yaml found (err %v)", err)
	}
	for _, p := range paths {
		cfg, err := Load(p, nil)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if cfg.Source.TokenFile == "" {
			t.Errorf("%s: the shipped config must read the token from a mounted Secret (source.token_file)", p)
		}
	}
}
