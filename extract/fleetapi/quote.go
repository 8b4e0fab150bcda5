package fleetapi

// jsonQuote follows a byte-by-byte scan of JSON text and tells which bytes
// lie inside a string, where brackets, separators, white space and bare
// words are text, not structure. A backslash escapes the byte after it, so
// \" does not end the string. The zero value is outside any string; a scan
// that stops mid-string and resumes keeps its jsonQuote: walk streams values
// across window refills, which is why a state of two bits rather than a
// function that skips a whole string.
//
// extract/fleetsim has the same type, on purpose (docs/architecture.md,
// "Justified twins"): neither package may import the other, and the
// simulator that renders the contexts this client compacts must not share
// its lexing, or a bug in it would pass every conformance test.
type jsonQuote struct{ in, esc bool }

// step moves past c and reports whether c belongs to a string, its quotes
// included; in is false again once the closing quote has been stepped over.
func (q *jsonQuote) step(c byte) bool {
	if q.in {
		switch {
		case q.esc:
			q.esc = false
		case c == '\\':
			q.esc = true
		case c == '"':
			q.in = false
		}
		return true
	}
	q.in = c == '"'
	return q.in
}
