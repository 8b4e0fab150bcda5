package fleetapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// The Platform API's objects are documented only field by field ("not shown
// beyond those listed"), and fleetsync must work against any faithful
// implementation of that description, not just fleetsim. The metadata fields
// below are therefore read leniently: a field that is absent, null or of an
// unexpected JSON type becomes its zero value instead of failing the whole
// page it came in. Only the shapes the sync cannot do without (the list
// envelope, the data points) are strict.

// looseString reads a JSON string as itself and a number as its text (an id
// sent as 42 is the id "42"); null and any other type give "".
type looseString string

// UnmarshalJSON implements json.Unmarshaler.
func (s *looseString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*s = ""
	if len(b) == 0 {
		return nil
	}
	switch {
	case b[0] == '"':
		if v, ok := plainJSONString(b); ok {
			*s = looseString(v)
			break
		}
		var v string
		if json.Unmarshal(b, &v) == nil {
			*s = looseString(v)
		}
	case b[0] == '-' || b[0] >= '0' && b[0] <= '9':
		*s = looseString(b)
	}
	return nil
}

// looseStrings reads an array, keeping its string (and number) elements;
// null and any other type give nil.
type looseStrings []string

// UnmarshalJSON implements json.Unmarshaler.
func (l *looseStrings) UnmarshalJSON(b []byte) error {
	*l = nil
	var raw []json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		return nil
	}
	out := make([]string, 0, len(raw))
	for _, r := range raw {
		var s looseString
		_ = s.UnmarshalJSON(r)
		if s != "" {
			out = append(out, string(s))
		}
	}
	*l = out
	return nil
}

// looseMillis reads an activity timestamp documented as POSIX milliseconds.
// It also takes a numeric string and an ISO-8601 string; null, absent and
// anything unreadable give 0 ("not reported").
type looseMillis int64

// UnmarshalJSON implements json.Unmarshaler.
func (m *looseMillis) UnmarshalJSON(b []byte) error {
	*m = 0
	if t, ok := looseInstant(b); ok {
		*m = looseMillis(t.UnixMilli())
	}
	return nil
}

// looseTime reads a resource metadata timestamp documented as an ISO-8601
// string in UTC. It also takes POSIX milliseconds (a number or a numeric
// string); anything else gives the zero time.
type looseTime time.Time

// UnmarshalJSON implements json.Unmarshaler.
func (t *looseTime) UnmarshalJSON(b []byte) error {
	*t = looseTime{}
	if tt, ok := looseInstant(b); ok {
		*t = looseTime(tt)
	}
	return nil
}

// looseInstant reads either kind of timestamp the API uses: POSIX
// milliseconds (a number or a numeric string) or an ISO-8601 string. A
// string cannot be both, so the order of the attempts does not matter.
// ok is false for null, absent and unreadable values.
func looseInstant(b []byte) (time.Time, bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return time.Time{}, false
	}
	if b[0] == '"' {
		s, ok := plainJSONString(b)
		if !ok && json.Unmarshal(b, &s) != nil {
			return time.Time{}, false
		}
		if t := parseTime(s); !t.IsZero() {
			return t, true
		}
		b = []byte(strings.TrimSpace(s))
		if len(b) == 0 {
			return time.Time{}, false
		}
	}
	ms, err := parseMillis(b)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms).UTC(), true
}

// Time gives the instant, the zero time when none was read.
func (t looseTime) Time() time.Time { return time.Time(t) }

// isoLayouts are the ISO-8601 forms read besides RFC 3339: without a zone
// (UTC, as the spec says metadata timestamps are), and with a space instead
// of the T.
var isoLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999Z0700",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02",
}

// parseTime reads an ISO-8601 resource timestamp; an absent or unreadable
// one gives the zero time, since a metadata date is not worth failing a
// listing for.
func parseTime(s string) time.Time {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}
	}
	for _, layout := range isoLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// looseNumber reads a JSON number, a numeric string or null into a float;
// ok is false for null, absent and non-numeric values.
func looseNumber(raw json.RawMessage) (v float64, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0, false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		return f, err == nil
	}
	f, err := parseFloat(raw)
	return f, err == nil
}

// plainJSONString reads a JSON string literal without escapes, control
// characters or bytes outside ASCII, whose value is the bytes between its
// quotes, without a decoder's second pass over it: a walk reads several
// such fields of every device and variable. ok is false for anything else,
// which json.Unmarshal then reads.
func plainJSONString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	in := b[1 : len(b)-1]
	for _, c := range in {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return "", false
		}
	}
	return string(in), true
}
