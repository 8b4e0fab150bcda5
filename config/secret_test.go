package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestSecretNeverPrintsItsValue tries every common way of printing a Secret,
// alone and inside a struct, and fails if the value shows.
func TestSecretNeverPrintsItsValue(t *testing.T) {
	const value = "tok-sekrit-value"
	s := Secret(value)
	type holder struct {
		Name  string
		Token Secret
		URL   SecretURL
	}
	h := holder{Name: "x", Token: s, URL: SecretURL("https://u:" + value + "@h/")}

	var outputs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%-20v", "%T %v"} {
		outputs = append(outputs,
			fmt.Sprintf(verb, s), fmt.Sprintf(verb, &s),
			fmt.Sprintf(verb, h), fmt.Sprintf(verb, &h),
			fmt.Sprintf(verb, []Secret{s}), fmt.Sprintf(verb, map[string]Secret{"k": s}))
	}
	outputs = append(outputs, fmt.Sprint(s), fmt.Sprintln(h), s.String())
	js, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	ys, err := yaml.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	txt, _ := s.MarshalText()
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("cfg", "token", s, "url", h.URL, "holder", h)
	outputs = append(outputs, string(js), string(ys), string(txt), logs.String())

	for _, out := range outputs {
		if strings.Contains(out, "sekrit") || strings.Contains(out, hexOf("sekrit")) {
			t.Errorf("secret value printed: %s", out)
		}
	}
	if got := fmt.Sprintf("%+v", h); !strings.Contains(got, "Token:<redacted>") || !strings.Contains(got, "URL:https://<redacted>@h/") {
		t.Errorf("%%+v = %s; want Token:<redacted> and URL:https://<redacted>@h/", got)
	}
	var back struct{ Token string }
	if err := json.Unmarshal(js, &back); err != nil || back.Token != "<redacted>" {
		t.Errorf("json = %s (token %q, %v); want the token as <redacted>", js, back.Token, err)
	}
	if s.Reveal() != value {
		t.Errorf("Reveal() = %q, want %q", s.Reveal(), value)
	}
}

func hexOf(s string) string { return fmt.Sprintf("%x", s) }

func TestEmptySecretPrintsEmpty(t *testing.T) {
	var s Secret
	if got := fmt.Sprintf("[%v][%s]", s, s); got != "[][]" {
		t.Errorf("empty secret printed as %s, want [][]", got)
	}
	if js, _ := json.Marshal(s); string(js) != `""` {
		t.Errorf("empty secret as JSON = %s, want \"\"", js)
	}
}

func TestSecretURLRedactsOnlyCredentials(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"http://pushgateway:9091", "http://pushgateway:9091"},
		{"https://push.example.com/base/", "https://push.example.com/base/"},
		{"https://user:pw-sekrit@push.example.com:9091/base", "https://<redacted>@push.example.com:9091/base"},
		{"https://sekrit-token@push.example.com", "https://<redacted>@push.example.com"},
		{"https://push.example.com/p?token=sekrit", "https://push.example.com/p?<redacted>"},
		{"https://u:sekrit@push.example.com/p?token=sekrit#frag", "https://<redacted>@push.example.com/p?<redacted>#frag"},
		{"https://u:sekrit%zz@push.example.com/", "<redacted>"}, // unparseable
		{"::sekrit", "<redacted>"},
	}
	for _, tt := range tests {
		u := SecretURL(tt.in)
		if got := u.String(); got != tt.want {
			t.Errorf("SecretURL(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		if got := fmt.Sprintf("%v|%+v|%#v|%q", u, u, u, u); strings.Contains(got, "sekrit") {
			t.Errorf("SecretURL(%q) printed %s", tt.in, got)
		}
		if u.Reveal() != tt.in {
			t.Errorf("Reveal() = %q, want %q", u.Reveal(), tt.in)
		}
	}
}
