package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// redacted is what every printing path shows instead of a secret.
const redacted = "<redacted>"

// Secret is a string that must never reach logs, errors or metrics: an API
// token or a password. Every way of printing it (fmt verbs including %#v and
// %+v of an enclosing struct, YAML, JSON, text, slog) shows "<redacted>" when
// it is set and "" when it is not, so a whole Config can be logged safely.
// Code that needs the value calls Reveal, which makes every use greppable.
type Secret string

// Reveal returns the secret's value, for the one place that must send it
// (an HTTP header, a database handshake).
func (s Secret) Reveal() string { return string(s) }

// String returns "<redacted>" when the secret is set and "" when it is empty,
// so that "is it set?" stays visible without showing the value.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// Format prints String for every verb and flag, so neither %v, %s, %q, %x
// nor %#v can print the value.
func (s Secret) Format(f fmt.State, verb rune) { formatRedacted(f, verb, s.String()) }

// MarshalText returns String, for encoders that use encoding.TextMarshaler.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalYAML returns String, so Config.Redacted and any YAML dump hide it.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON returns String as a JSON string.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// LogValue returns String, so slog never sees the value.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// SecretURL is a URL that may carry credentials (https://user:pass@host/).
// It prints with the user information (and any query, where tokens hide)
// replaced by "<redacted>", keeping scheme, host and path visible, because
// they are what one needs to debug a connection. An unparseable value prints
// as "<redacted>" entirely. Reveal gives the URL to dial.
type SecretURL string

// Reveal returns the URL with its credentials, for the one place that dials it.
func (u SecretURL) Reveal() string { return string(u) }

// String returns the URL with user information and query replaced by
// "<redacted>"; "" when unset.
func (u SecretURL) String() string {
	if u == "" {
		return ""
	}
	p, err := url.Parse(string(u))
	if err != nil {
		return redacted
	}
	hadUser := p.User != nil
	hadQuery := p.RawQuery != "" || p.ForceQuery
	p.User = nil
	p.RawQuery, p.ForceQuery = "", false
	s := p.String()
	if hadUser {
		if i := strings.Index(s, "//"); i >= 0 {
			s = s[:i+2] + redacted + "@" + s[i+2:]
		} else {
			return redacted
		}
	}
	if hadQuery {
		// The fragment, if any, was printed after the path; the query
		// goes before it.
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i] + "?" + redacted + s[i:]
		} else {
			s += "?" + redacted
		}
	}
	return s
}

// Format prints String for every verb and flag.
func (u SecretURL) Format(f fmt.State, verb rune) { formatRedacted(f, verb, u.String()) }

// MarshalText returns String.
func (u SecretURL) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// MarshalYAML returns String.
func (u SecretURL) MarshalYAML() (any, error) { return u.String(), nil }

// MarshalJSON returns String as a JSON string.
func (u SecretURL) MarshalJSON() ([]byte, error) { return json.Marshal(u.String()) }

// LogValue returns String.
func (u SecretURL) LogValue() slog.Value { return slog.StringValue(u.String()) }

// formatRedacted prints the already redacted text s honouring the verb and
// flags as for a plain string (%q quotes, %#v gives Go syntax, %x hex-encodes
// the redacted text). Verbs that make no sense for a string fall back to %s
// rather than fmt's "%!d(...)" form, which would show the type.
func formatRedacted(f fmt.State, verb rune, s string) {
	switch verb {
	case 'v', 's', 'q', 'x', 'X':
		fmt.Fprintf(f, fmt.FormatString(f, verb), s)
	default:
		fmt.Fprint(f, s)
	}
}
