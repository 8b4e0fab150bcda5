package fleetsim

// jsonQuote follows a byte-by-byte scan of JSON text and tells which bytes
// lie inside a string, where brackets, separators, white space and bare
// words are text, not structure. A backslash escapes the byte after it, so
// \" does not end the string. The zero value is outside any string; a scan
// that stops mid-string and resumes keeps its jsonQuote.
//
// extract/fleetapi has the same type: the simulator and the API client may
// import nothing of each other nor any other fleetsync package (see
// cmd/fleetsync/deps_test.go), so there is no place both could share it;
// nor should they, since the client is tested against what the simulator
// renders (docs/architecture.md, "Justified twins").
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
