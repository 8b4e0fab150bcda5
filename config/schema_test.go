package config

import (
	"reflect"
	"testing"
)

// TestEveryKeyAcceptsItsDefault: each key's default, printed as text, parses
// back through setScalar to the same value, so every field type is one the
// loader handles and the defaults quoted in messages are valid input.
func TestEveryKeyAcceptsItsDefault(t *testing.T) {
	for _, k := range newSchema().keys {
		v := k.field(Default())
		if isList(v.Type()) {
			continue // lists are set item by item, not by setScalar
		}
		cfg := Default()
		if err := setScalar(k.field(cfg), formatValue(v), exampleOf(k)); err != nil {
			t.Errorf("%s: its default %q does not parse: %v", k.path, formatValue(v), err)
			continue
		}
		if got := k.field(cfg).Interface(); !reflect.DeepEqual(got, v.Interface()) {
			t.Errorf("%s: default %#v read back as %#v", k.path, v.Interface(), got)
		}
	}
}

func TestSuggestFindsTyposOnly(t *testing.T) {
	known := []string{"lookback", "lease_ttl", "schedule", "addr"}
	tests := []struct{ in, want string }{
		{"lookbak", "lookback"},
		{"look_back", "lookback"},
		{"schedul", "schedule"},
		{"adr", "addr"},
		{"add", "addr"},
		{"xyz", ""},
		{"ttl", ""},
		{"a", ""},
	}
	for _, tt := range tests {
		if got := suggest(tt.in, known); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
