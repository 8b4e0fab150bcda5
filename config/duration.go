package config

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Duration is a time.Duration that also accepts days: it parses every Go
// duration ("300ms", "1h30m") plus a "d" unit of 24 hours ("730d", "1d12h"),
// because retention windows are naturally counted in days. It decodes from
// YAML, JSON and environment variables through UnmarshalText and prints in
// the same syntax (days first), so a printed configuration reads back.
type Duration time.Duration

// day is the length the "d" unit stands for; calendar days (DST) do not
// matter for retention windows and lags.
const day = 24 * time.Hour

// unitNanos is the length of each unit ParseDuration knows: Go's, plus d.
var unitNanos = map[string]uint64{
	"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6,
	"s": 1e9, "m": 60e9, "h": 3600e9, "d": 86400e9,
}

// ParseDuration parses a Go duration with an optional "d" (24h) unit, e.g.
// "730d", "1d12h", "-1.5d", "90s". Like time.ParseDuration it takes an
// optional sign and a sequence of decimal numbers, each with an optional
// fraction and a unit; a bare "0" is zero. Without a "d" it accepts exactly
// what time.ParseDuration accepts (FuzzParseDuration checks that).
func ParseDuration(s string) (Duration, error) {
	orig := s
	fail := func(why string) (Duration, error) {
		return 0, fmt.Errorf("invalid duration %q: %s; write it like 90s, 1h30m or 730d", orig, why)
	}
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return fail("empty")
	}
	const limit = 1 << 63 // |math.MinInt64|; the positive side is checked at the end
	var total uint64
	for s != "" {
		// A term: digits, optionally '.' and more digits, then a unit.
		intPart, rest := leadingDigits(s)
		var frac string
		if rest != "" && rest[0] == '.' {
			frac, rest = leadingDigits(rest[1:])
		}
		if intPart == "" && frac == "" {
			return fail("expected a number")
		}
		number := s[:len(s)-len(rest)]
		i := 0
		for i < len(rest) && rest[i] != '.' && (rest[i] < '0' || rest[i] > '9') {
			i++
		}
		unitName := rest[:i]
		s = rest[i:]
		if unitName == "" {
			return fail("missing unit after " + number + " (ns, us, ms, s, m, h or d)")
		}
		unit, ok := unitNanos[unitName]
		if !ok {
			return fail(fmt.Sprintf("unknown unit %q (use ns, us, ms, s, m, h or d)", unitName))
		}
		var v uint64
		for _, c := range intPart {
			if v > (limit-uint64(c-'0'))/10 {
				return fail("too long")
			}
			v = v*10 + uint64(c-'0')
		}
		if v > limit/unit {
			return fail("too long")
		}
		v *= unit
		if frac != "" {
			// Digits beyond what a uint64 can scale add nothing measurable.
			var f, scale uint64 = 0, 1
			for _, c := range frac {
				if scale > (1<<63)/10 {
					break
				}
				f, scale = f*10+uint64(c-'0'), scale*10
			}
			v += uint64(float64(f) * (float64(unit) / float64(scale)))
			if v > limit {
				return fail("too long")
			}
		}
		total += v
		if total > limit {
			return fail("too long")
		}
	}
	if neg {
		return Duration(-int64(total)), nil // total == limit gives MinInt64
	}
	if total > math.MaxInt64 {
		return fail("too long")
	}
	return Duration(total), nil
}

// leadingDigits splits s after its leading ASCII digits.
func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}

// String prints the duration in the syntax ParseDuration reads, with whole
// days as "d" and without zero components: "730d", "1d12h", "1h30m", "500ms".
func (d Duration) String() string {
	if d == 0 {
		return "0s"
	}
	if d < 0 {
		if d == math.MinInt64 {
			// Cannot be negated; Go's own spelling still parses back.
			return time.Duration(d).String()
		}
		return "-" + (-d).String()
	}
	v := time.Duration(d)
	if v < time.Second {
		return v.String()
	}
	var b strings.Builder
	for _, u := range []struct {
		size time.Duration
		name string
	}{{day, "d"}, {time.Hour, "h"}, {time.Minute, "m"}} {
		if n := v / u.size; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.name)
			v -= n * u.size
		}
	}
	if v > 0 {
		// Seconds with any fraction ("5.5s"), or only a fraction ("500ms").
		b.WriteString(v.String())
	}
	return b.String()
}

// MarshalText prints the duration as String does, so YAML and JSON output
// carry "730d" rather than nanoseconds.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}

// UnmarshalText parses text with ParseDuration. YAML (any scalar), JSON
// strings and environment variables all come through here.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := ParseDuration(string(text))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
