package fleetapi

// LatLng reads the top-level `lat` and `lng` members of a context object (as
// the decoders emit it, though whitespace is tolerated). Only JSON numbers
// count: a string, null or any other value leaves the flag false. When a key
// repeats, the last occurrence wins, as with encoding/json. Malformed input
// never panics; whatever was read before the fault is returned.
func LatLng(ctx []byte) (lat, lng float64, hasLat, hasLng bool) {
	i, _ := skipSpace(ctx, 0)
	if i >= len(ctx) || ctx[i] != '{' {
		return
	}
	i++
	for {
		i, _ = skipSpace(ctx, i)
		if i >= len(ctx) || ctx[i] != '"' {
			return
		}
		ke, err := scanString(ctx, i)
		if err != nil {
			return
		}
		key := ctx[i+1 : ke-1]
		i, _ = skipSpace(ctx, ke)
		if i >= len(ctx) || ctx[i] != ':' {
			return
		}
		vs, _ := skipSpace(ctx, i+1)
		ve, _, err := scanValue(ctx, vs, 0)
		if err != nil {
			return
		}
		isLat := string(key) == "lat"
		if isLat || string(key) == "lng" {
			f, ok := 0.0, false
			if c := ctx[vs]; c == '-' && vs+1 < ve && ctx[vs+1] != 'I' || c >= '0' && c <= '9' {
				if v, err := parseFloat(ctx[vs:ve]); err == nil {
					f, ok = v, true
				}
			}
			if isLat {
				lat, hasLat = f, ok
			} else {
				lng, hasLng = f, ok
			}
		}
		i, _ = skipSpace(ctx, ve)
		if i >= len(ctx) || ctx[i] != ',' {
			return
		}
		i++
	}
}
