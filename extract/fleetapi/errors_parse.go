package fleetapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Reading the service's error responses: ParseError turns a non-2xx
// answer of any documented shape into an APIError, and namedVariable
// finds which requested variable a rejection names. errors.go holds the
// error types and how each is classified.

// ParseError builds the APIError of a non-2xx response from its status and
// body. It accepts any of the four documented shapes, an empty body and
// anything else (the text then becomes the message), and never fails.
func ParseError(status int, body []byte) *APIError {
	e := &APIError{Status: status}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return e
	}
	var m map[string]json.RawMessage
	if trimmed[0] != '{' || json.Unmarshal(trimmed, &m) != nil {
		e.Message = oneLine(string(bytes.ToValidUTF8(trimmed, []byte("?"))), 300)
		return e
	}
	if raw, ok := m["code"]; ok {
		e.Code = parseCode(raw)
	}
	if raw, ok := m["message"]; ok {
		e.Message = rawText(raw)
	}
	if raw, ok := m["description"]; ok {
		e.Description = rawText(raw)
	}
	if raw, ok := m["detail"]; ok {
		var d any
		if json.Unmarshal(raw, &d) == nil {
			e.Detail = d
		}
	}
	if e.Code == 0 && e.Message == "" && e.Description == "" && e.Detail == nil {
		// An object of some other shape: keep it readable.
		e.Message = oneLine(string(trimmed), 300)
	}
	return e
}

// parseCode reads a code given as a number or a numeric string.
func parseCode(raw json.RawMessage) int {
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		if i, err := n.Int64(); err == nil && i >= 0 && i <= 1<<31 {
			return int(i)
		}
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if i, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && i >= 0 {
			return i
		}
	}
	return 0
}

// rawText renders a JSON value as text: a string as itself, anything else as
// its JSON.
func rawText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if string(raw) == "null" {
		return ""
	}
	return string(raw)
}

// parseRetryAfter reads a Retry-After header in its seconds or HTTP-date
// form; ok is false when absent or unreadable.
func parseRetryAfter(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			secs = 0
		}
		if secs > 86400 {
			secs = 86400
		}
		return now.Add(time.Duration(secs) * time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// namedVariable returns the position in ids of the one id that body names
// (in any string or object key of a JSON body, or anywhere in another
// body), or -1 when it names none or more than one. An id counts only as a
// whole word: not followed or preceded by a letter, digit, '_' or '-'.
func namedVariable(body []byte, ids []string) int {
	var texts []string
	var doc any
	if json.Unmarshal(body, &doc) == nil {
		texts = jsonTexts(doc, texts)
	} else {
		texts = append(texts, string(body))
	}
	found := -1
	for i, id := range ids {
		if id == "" {
			continue
		}
		for _, t := range texts {
			if containsWord(t, id) {
				if found >= 0 {
					return -1
				}
				found = i
				break
			}
		}
	}
	return found
}

// jsonTexts appends every string and object key held by v.
func jsonTexts(v any, out []string) []string {
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, e := range v {
			out = jsonTexts(e, out)
		}
	case map[string]any:
		for k, e := range v {
			out = append(out, k)
			out = jsonTexts(e, out)
		}
	}
	return out
}

// containsWord tells whether word occurs in s with no id character on
// either side.
func containsWord(s, word string) bool {
	for from := 0; from <= len(s)-len(word); {
		i := strings.Index(s[from:], word)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(word)
		if (i == 0 || !idChar(s[i-1])) && (end == len(s) || !idChar(s[end])) {
			return true
		}
		from = i + 1
	}
	return false
}

func idChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-'
}
