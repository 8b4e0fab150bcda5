package fleetsim

import (
	"net/url"
	"strings"
)

// Filters. Only a few lookups are understood; every other query key, and a
// known key with a value it cannot use, is ignored, so the list may come back
// whole, as the spec says the service does with invalid filter syntax.

// parseInList reads the value of an __in lookup: a comma-separated list
// ("a,b"), or the same in one pair of square brackets with items optionally
// quoted ("[a,b]", `["a","b"]`). ok is false for invalid syntax: an unclosed
// quote, brackets, parentheses or braces that do not balance, a square
// bracket inside an item (a nested list), or no item at all.
func parseInList(v string) (items []string, ok bool) {
	if !balanced(v) {
		return nil, false
	}
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '[' && v[len(v)-1] == ']' && balanced(v[1:len(v)-1]) {
		v = v[1 : len(v)-1]
	}
	var quote byte
	start := 0
	flush := func(end int) bool {
		it := strings.TrimSpace(v[start:end])
		if len(it) >= 2 && (it[0] == '"' || it[0] == '\'') && it[len(it)-1] == it[0] {
			it = it[1 : len(it)-1]
		} else if strings.ContainsAny(it, "[]") {
			return false
		}
		if it != "" {
			items = append(items, it)
		}
		return true
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == ',':
			if !flush(i) {
				return nil, false
			}
			start = i + 1
		}
	}
	if !flush(len(v)) || len(items) == 0 {
		return nil, false
	}
	return items, true
}

// balanced reports whether the quotes of v are closed and its brackets,
// parentheses and braces (outside quotes) balance and nest.
func balanced(v string) bool {
	var stack []byte
	var quote byte
	for i := 0; i < len(v); i++ {
		c := v[i]
		if quote != 0 {
			if c == quote {
				quote = 0
			}
			continue
		}
		switch c {
		case '"', '\'':
			quote = c
		case '[', '(', '{':
			stack = append(stack, c)
		case ']', ')', '}':
			open := map[byte]byte{']': '[', ')': '(', '}': '{'}[c]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return quote == 0 && len(stack) == 0
}

func filterBy[T any](items []T, q url.Values, fields map[string]func(T) []string) []T {
	out := items
	for key, vals := range q {
		if len(vals) == 0 || vals[0] == "" {
			continue
		}
		name, op, _ := strings.Cut(key, "__")
		get, ok := fields[name]
		if !ok {
			continue
		}
		var keep func([]string) bool
		switch op {
		case "", "exact":
			want := vals[0]
			keep = func(have []string) bool { return len(have) > 0 && have[0] == want }
		case "in":
			want, ok := parseInList(vals[0])
			if !ok {
				continue // invalid syntax: ignored
			}
			keep = func(have []string) bool {
				for _, w := range want {
					if len(have) > 0 && have[0] == w {
						return true
					}
				}
				return false
			}
		case "contains":
			want := vals[0]
			keep = func(have []string) bool {
				for _, h := range have {
					if h == want {
						return true
					}
				}
				return false
			}
		default:
			continue // a lookup we do not know: ignored
		}
		var f []T
		for _, it := range out {
			if keep(get(it)) {
				f = append(f, it)
			}
		}
		out = f
	}
	return out
}

var deviceFilters = map[string]func(*device) []string{
	"id":    func(d *device) []string { return []string{d.id} },
	"label": func(d *device) []string { return []string{d.label} },
	"name":  func(d *device) []string { return []string{d.name} },
	"tags":  func(d *device) []string { return d.tags },
}

var variableFilters = map[string]func(*variable) []string{
	"id":     func(v *variable) []string { return []string{v.id} },
	"label":  func(v *variable) []string { return []string{v.label} },
	"name":   func(v *variable) []string { return []string{v.name} },
	"device": func(v *variable) []string { return []string{v.dev.id} },
}

var groupFilters = map[string]func(*group) []string{
	"id":    func(g *group) []string { return []string{g.id} },
	"label": func(g *group) []string { return []string{g.label} },
	"tags":  func(g *group) []string { return g.tags },
}
