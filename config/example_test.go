package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestExampleParsesToTheDefaults: the printed example is a working file and
// states the real defaults; only its two sample values differ.
func TestExampleParsesToTheDefaults(t *testing.T) {
	cfg, err := Parse([]byte(Example()), "example.yaml", nil)
	if err != nil {
		t.Fatalf("the example does not parse:\n%v", err)
	}
	want := Default()
	want.Source.BaseURL = "http://127.0.0.1:8080"
	want.Source.TokenFile = "/run/secrets/fleet-token"
	if !reflect.DeepEqual(cfg, want) {
		for _, k := range newSchema().keys {
			if g, w := k.field(cfg).Interface(), k.field(want).Interface(); !reflect.DeepEqual(g, w) {
				t.Errorf("example sets %s = %#v, default is %#v", k.path, g, w)
			}
		}
	}
}

// TestExampleShowsEveryKeyWithAComment: every key is written out (not left
// to its default silently), and the example is commented.
func TestExampleShowsEveryKeyWithAComment(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(Example()), &doc); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	var walk func(prefix string, m *yaml.Node)
	walk = func(prefix string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			path := m.Content[i].Value
			if prefix != "" {
				path = prefix + "." + path
			}
			present[path] = true
			if m.Content[i+1].Kind == yaml.MappingNode {
				walk(path, m.Content[i+1])
			}
		}
	}
	walk("", doc.Content[0])
	for _, k := range newSchema().keys {
		if !present[k.path] {
			t.Errorf("the example does not show %s", k.path)
		}
	}
	if n := strings.Count(Example(), "\n  #"); n < 30 {
		t.Errorf("the example has only %d key comments", n)
	}
}

// TestRedactedPrintsTheConfigWithoutSecrets: Redacted reads back to the same
// configuration when there is nothing to hide, and hides what there is.
func TestRedactedPrintsTheConfigWithoutSecrets(t *testing.T) {
	cfg := mustLoad(t, "testdata/good/full.yaml")
	cfg.Source.Token = ""
	cfg.Source.TokenFile = "/t"
	back, err := Parse([]byte(cfg.Redacted()), "redacted.yaml", nil)
	if err != nil {
		t.Fatalf("Redacted output does not parse: %v\n%s", err, cfg.Redacted())
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("Redacted output reads back as\n%+v\nwant\n%+v", back, cfg)
	}

	cfg = mustLoad(t, "testdata/good/ipv6_and_credentials.yaml")
	cfg.Source.TokenFile, cfg.Source.Token = "", "tok-password-0123456789"
	out := cfg.Redacted()
	if strings.Contains(out, "password-0123456789") {
		t.Errorf("Redacted shows a secret:\n%s", out)
	}
	for _, want := range []string{"token: <redacted>", "password: <redacted>", "pushgateway_url: https://<redacted>@push.example.com:9091/base", "retention: 730d"} {
		if !strings.Contains(out, want) {
			t.Errorf("Redacted lacks %q:\n%s", want, out)
		}
	}
	if s := fmt.Sprintf("%+v|%v|%#v", cfg, *cfg, cfg); strings.Contains(s, "password-0123456789") {
		t.Errorf("printing the config shows a secret: %s", s)
	}
}
