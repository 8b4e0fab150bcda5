package config

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestParseDurationAcceptsGoDurationsAndDays(t *testing.T) {
	const d = 24 * time.Hour
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"-0", 0},
		{"0s", 0},
		{"300ms", 300 * time.Millisecond},
		{"1.5s", 1500 * time.Millisecond},
		{".5h", 30 * time.Minute},
		{"90s", 90 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"2h45m30.5s", 2*time.Hour + 45*time.Minute + 30500*time.Millisecond},
		{"10us", 10 * time.Microsecond},
		{"10µs", 10 * time.Microsecond},
		{"10μs", 10 * time.Microsecond},
		{"7ns", 7},
		{"1d", d},
		{"730d", 730 * d},
		{"1d12h", d + 12*time.Hour},
		{"1.5d", 36 * time.Hour},
		{"1h1d", d + time.Hour}, // order is free, as in Go
		{"2d2d", 4 * d},
		{"-1d", -d},
		{"+3d", 3 * d},
		{"-1h30m", -90 * time.Minute},
		{"106751d", 106751 * d}, // close to the int64 limit (~106751.99 days)
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err != nil {
			t.Errorf("ParseDuration(%q): %v", tt.in, err)
			continue
		}
		if time.Duration(got) != tt.want {
			t.Errorf("ParseDuration(%q) = %v, want %v", tt.in, time.Duration(got), tt.want)
		}
	}
}

func TestParseDurationRejectsMalformedInput(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty"},
		{"-", "empty"},
		{"5", "missing unit after 5"},
		{"730", "missing unit after 730"},
		{"1h5", "missing unit after 5"},
		{"d", "expected a number"},
		{"1x", `unknown unit "x"`},
		{"1D", `unknown unit "D"`},
		{"1w", `unknown unit "w"`},
		{"1d 2h", `unknown unit "d "`},
		{" 1h", "expected a number"},
		{"1.2.3h", "missing unit after 1.2"},
		{"1..2h", "missing unit after 1."},
		{".d", "expected a number"},
		{"--1h", "expected a number"},
		{"107000d", "too long"},
		{"106751d24h", "too long"},
		{"9999999999999999999h", "too long"},
		{"99999999999999999999999ns", "too long"},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error containing %q", tt.in, got, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "730d") {
			t.Errorf("ParseDuration(%q) error = %q, want it to contain %q and an example", tt.in, err, tt.want)
		}
	}
}

func TestDurationStringUsesDaysAndParsesBack(t *testing.T) {
	const d = 24 * time.Hour
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{500 * time.Millisecond, "500ms"},
		{7, "7ns"},
		{time.Second, "1s"},
		{90 * time.Second, "1m30s"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{d, "1d"},
		{730 * d, "730d"},
		{d + 12*time.Hour, "1d12h"},
		{d + 500*time.Millisecond, "1d500ms"},
		{time.Hour + 5500*time.Millisecond, "1h5.5s"},
		{-d, "-1d"},
		{-90 * time.Minute, "-1h30m"},
		{math.MaxInt64, "106751d23h47m16.854775807s"},
		{math.MinInt64, "-2562047h47m16.854775808s"},
	}
	for _, tt := range tests {
		got := Duration(tt.in).String()
		if got != tt.want {
			t.Errorf("Duration(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
		}
		back, err := ParseDuration(got)
		if err != nil || time.Duration(back) != tt.in {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v back", got, time.Duration(back), err, tt.in)
		}
	}
}

func TestDurationDecodesFromYAMLAndJSON(t *testing.T) {
	var y struct {
		A, B, C Duration
	}
	if err := yaml.Unmarshal([]byte("a: 730d\nb: 1h30m\nc: 0\n"), &y); err != nil {
		t.Fatal(err)
	}
	if y.A != Duration(730*day) || y.B != Duration(90*time.Minute) || y.C != 0 {
		t.Errorf("yaml decoded %v %v %v, want 730d 1h30m 0s", y.A, y.B, y.C)
	}
	if err := yaml.Unmarshal([]byte("a: 5\n"), &y); err == nil {
		t.Errorf("yaml accepted a duration without a unit (a: 5), decoded %v", y.A)
	}

	var j struct{ D Duration }
	if err := json.Unmarshal([]byte(`{"D":"1d12h"}`), &j); err != nil {
		t.Fatal(err)
	}
	if j.D != Duration(36*time.Hour) {
		t.Errorf("json decoded %v, want 1d12h", j.D)
	}
	out, err := json.Marshal(j)
	if err != nil || string(out) != `{"D":"1d12h"}` {
		t.Errorf("json.Marshal = %s, %v; want {\"D\":\"1d12h\"}", out, err)
	}
	yout, err := yaml.Marshal(y)
	if err != nil || !strings.Contains(string(yout), "a: 730d") {
		t.Errorf("yaml.Marshal = %q, %v; want it to contain a: 730d", yout, err)
	}
}

// FuzzParseDuration: no panic; whatever parses prints back to the same value;
// and without a "d" the result is time.ParseDuration's, error or value.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"730d", "1d12h", "-1.5d", "90s", "1h30m", "0", "5", ".5µs", "106751d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if !strings.Contains(s, "d") {
			want, werr := time.ParseDuration(s)
			if (err == nil) != (werr == nil) || (err == nil && time.Duration(d) != want) {
				t.Fatalf("ParseDuration(%q) = %d, %v; time.ParseDuration gives %d, %v", s, int64(d), err, int64(want), werr)
			}
		}
		if err != nil {
			return
		}
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %d; its String %q parses to %d, %v", s, int64(d), d.String(), int64(back), err)
		}
	})
}
