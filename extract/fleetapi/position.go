package fleetapi

// position is what a point's context says of where the point was: the
// top-level "lat" and "lng" members of the context object when they are
// numbers (the API's convention: a position point carries them in its
// context). The decoders read it while they scan the context to validate
// it (scanValue), so that no context is scanned twice: a quarter of a
// typical fleet's points are positions, and a second pass over every
// context cost more than the rest of the row.
//
// Which numbers count, as the warehouse's lat and lng columns have always
// had them:
//   - only top-level members: {"pos":{"lat":1}} has no position;
//   - a key written with an escape ("la\u0074") is another key;
//   - a repeated key: its last number wins, and a later value that is not a
//     number leaves the earlier one;
//   - a number out of float64's range (1e400) is no coordinate, rather
//     than ±Inf;
//   - a top-level member whose value is a bare NaN, Infinity or -Infinity
//     (Python's json module writes them; the decoders keep them verbatim)
//     makes the context not JSON, and it gives no position at all, not even
//     a coordinate read before it. Such a token nested deeper is skipped
//     like any nested value.
type position struct {
	lat, lng       float64
	hasLat, hasLng bool
	// void says a top-level bare non-finite token was seen: no position.
	void bool
}

// member notes one top-level member of the context: key is its raw key,
// quotes included, and val its raw value, both as scanValue validated them.
func (p *position) member(key, val []byte) {
	if p.void {
		return
	}
	switch c := val[0]; {
	case c == 'N' || c == 'I' || c == '-' && len(val) > 1 && val[1] == 'I':
		*p = position{void: true}
	case c == '-' || c >= '0' && c <= '9':
		switch string(key) {
		case `"lat"`:
			if f, err := parseFloat(val); err == nil {
				p.lat, p.hasLat = f, true
			}
		case `"lng"`:
			if f, err := parseFloat(val); err == nil {
				p.lng, p.hasLng = f, true
			}
		}
	}
}

// point is the Point of ts, val and the context ctx whose position p is.
func (p *position) point(ts int64, val float64, ctx []byte) Point {
	return Point{TsMs: ts, Value: val, Context: ctx, Lat: p.lat, Lng: p.lng, HasLat: p.hasLat, HasLng: p.hasLng}
}
