package fleetsim

import (
	"math"
	"sort"
	"strconv"
)

const (
	minTs = math.MinInt64
	maxTs = math.MaxInt64
)

// genSpec computes a variable's generated points on demand. Index i runs over
// nOld points older than the retention window, then n regular points spaced
// stepMs apart (minus a jitter below stepMs/2, so timestamps stay strictly
// increasing) with the newest at endMs. It is immutable once built.
type genSpec struct {
	kind          kind
	n, nOld       int
	endMs, stepMs int64
	jitter        int64
	oldBase       int64
	lastMs        int64 // created_at never goes past it
	tseed, vseed  uint64
	phase         float64
	lat, lng      float64
	// ctxBytes pads each context to at least this many bytes (0: off;
	// Options.ContextBytes).
	ctxBytes int
}

func (g *genSpec) total() int { return g.n + g.nOld }

func (g *genSpec) ts(i int) int64 {
	if i < g.nOld {
		return g.oldBase - int64(g.nOld-1-i)*dayMs
	}
	j := i - g.nOld
	t := g.endMs - int64(g.n-1-j)*g.stepMs
	if g.jitter > 0 && j != g.n-1 {
		t -= int64(splitmix64(g.tseed^uint64(j)) % uint64(g.jitter))
	}
	return t
}

// value of point i whose timestamp is ts.
func (g *genSpec) value(i int, ts int64) float64 {
	r := unit01(splitmix64(g.vseed ^ uint64(i)))
	day := float64(ts%dayMs) / dayMs * 2 * math.Pi
	switch g.kind {
	case kindTemperature:
		return round(21+6*math.Sin(day+g.phase)+(r-0.5)*2, 2)
	case kindHumidity:
		return round(min(max(55+15*math.Sin(day+g.phase)+(r-0.5)*6, 0), 100), 1)
	case kindBattery:
		frac := 0.0
		if g.n > 0 {
			frac = float64(max(i-g.nOld, 0)) / float64(g.n)
		}
		return round(min(max(100-60*frac+(r-0.5)*2, 0), 100), 2)
	default: // position: accuracy of the fix in metres
		return round(3+45*r*r, 1)
	}
}

var (
	ctxSensor   = []byte(`{"sensor":"probe-2"}`)
	ctxCharging = []byte(`{"charging":true}`)
	ctxEmpty    = []byte(`{}`)
)

// maxContextBytes bounds Options.ContextBytes: a context is one cell of a
// row, and a client may bound the size of one JSON token.
const maxContextBytes = 64 << 10

// appendContext appends point i's context object as compact JSON, padded
// to g.ctxBytes when set.
func (g *genSpec) appendContext(buf []byte, i int) []byte {
	if g.ctxBytes <= 0 {
		return g.appendBaseContext(buf, i)
	}
	start := len(buf)
	buf = g.appendBaseContext(buf, i)
	return padContext(buf, start, g.ctxBytes, splitmix64(g.vseed^0x9ad^uint64(i)))
}

// padContext adds a member "pad" to the object buf[start:] (compact JSON,
// ending in '}') so that it is at least want bytes long; an object already
// that long is left as it is. The pad's first 16 characters are h in hex,
// so that no two points' contexts need be equal, the rest repeat them.
func padContext(buf []byte, start, want int, h uint64) []byte {
	n := len(buf) - start
	if n >= want {
		return buf
	}
	buf = buf[:len(buf)-1] // the closing '}'
	if n > 2 {
		buf = append(buf, ',')
	}
	buf = append(buf, `"pad":"`...)
	fill := want - (len(buf) - start) - 2 // the closing `"}`
	var hex [16]byte
	for k := range hex {
		hex[k] = hexDigits[h>>(60-4*k)&0xf]
	}
	for fill > 0 {
		k := min(fill, len(hex))
		buf = append(buf, hex[:k]...)
		fill -= k
	}
	return append(buf, '"', '}')
}

// appendBaseContext appends point i's generated context object as compact
// JSON.
func (g *genSpec) appendBaseContext(buf []byte, i int) []byte {
	switch g.kind {
	case kindPosition:
		h := splitmix64(g.vseed ^ 0xa5a5 ^ uint64(i))
		fi := float64(i) / 40
		lat := round(g.lat+0.03*math.Sin(fi+g.phase)+(unit01(h)-0.5)*0.001, 6)
		lng := round(g.lng+0.03*math.Cos(fi+g.phase)+(unit01(splitmix64(h))-0.5)*0.001, 6)
		buf = append(buf, `{"lat":`...)
		buf = appendFloat(buf, lat)
		buf = append(buf, `,"lng":`...)
		buf = appendFloat(buf, lng)
		return append(buf, '}')
	case kindTemperature:
		if splitmix64(g.vseed^0x77^uint64(i))%97 == 0 {
			return append(buf, ctxSensor...)
		}
	case kindBattery:
		if splitmix64(g.vseed^0x77^uint64(i))%53 == 0 {
			return append(buf, ctxCharging...)
		}
	}
	return append(buf, ctxEmpty...)
}

func (g *genSpec) createdAt(i int, ts int64) int64 {
	c := ts + int64(splitmix64(g.vseed^0x3c3c^uint64(i))%1500)
	if ts <= g.lastMs && c > g.lastMs {
		c = g.lastMs
	}
	return c
}

// overlayPoint is a point added after generation.
type overlayPoint struct {
	ts, created int64
	value       float64
	ctx         []byte // compact JSON; nil means {}
}

// series is a variable's points: the generator plus the overlay of added
// points, sorted by timestamp, which wins over a generated point at the same
// timestamp. A series value is a snapshot: readers copy it under the read
// lock and iterate without the lock. Writers only append past the end of the
// overlay slices (invisible to existing snapshots, whose lengths are fixed) or
// replace them with fresh copies, never modify elements a snapshot can see.
type series struct {
	gen genSpec
	ov  []overlayPoint
}

// insert adds p, replacing a point at the same timestamp. Caller holds the
// write lock.
func (s *series) insert(p overlayPoint) {
	n := len(s.ov)
	if n == 0 || p.ts > s.ov[n-1].ts {
		s.ov = append(s.ov, p)
		return
	}
	i := sort.Search(n, func(k int) bool { return s.ov[k].ts >= p.ts })
	fresh := make([]overlayPoint, 0, n+1+n/4)
	fresh = append(fresh, s.ov[:i]...)
	fresh = append(fresh, p)
	if i < n && s.ov[i].ts == p.ts {
		i++
	}
	s.ov = append(fresh, s.ov[i:]...)
}

// newestTs returns the greatest timestamp of the series.
func (s *series) newestTs() (int64, bool) {
	c := s.cursor(minTs, maxTs)
	if !c.next() {
		return 0, false
	}
	return c.ts, true
}

// cursor iterates the points with lo <= ts <= hi, newest first.
func (s *series) cursor(lo, hi int64) cursor {
	c := cursor{g: &s.gen, ov: s.ov}
	if lo > hi {
		c.gi, c.gStop, c.oi, c.oStop = -1, 0, -1, 0
		return c
	}
	n := s.gen.total()
	c.gStop = sort.Search(n, func(i int) bool { return s.gen.ts(i) >= lo })
	c.gi = sort.Search(n, func(i int) bool { return s.gen.ts(i) > hi }) - 1
	c.oStop = sort.Search(len(s.ov), func(i int) bool { return s.ov[i].ts >= lo })
	c.oi = sort.Search(len(s.ov), func(i int) bool { return s.ov[i].ts > hi }) - 1
	if c.gi >= c.gStop {
		c.gHead = s.gen.ts(c.gi)
	}
	return c
}

// cursor walks a series snapshot newest first. After next returns true, ts
// holds the current point's timestamp and value, appendContext and createdAt
// read the rest of it.
type cursor struct {
	g         *genSpec
	ov        []overlayPoint
	gi, gStop int
	gHead     int64 // g.ts(gi) while gi >= gStop
	oi, oStop int

	ts      int64
	fromGen bool
	idx     int
}

func (c *cursor) next() bool {
	gOK, oOK := c.gi >= c.gStop, c.oi >= c.oStop
	switch {
	case gOK && (!oOK || c.gHead > c.ov[c.oi].ts):
		c.ts, c.fromGen, c.idx = c.gHead, true, c.gi
		c.gi--
		if c.gi >= c.gStop {
			c.gHead = c.g.ts(c.gi)
		}
		return true
	case oOK:
		c.ts, c.fromGen, c.idx = c.ov[c.oi].ts, false, c.oi
		if gOK && c.gHead == c.ts { // the added point replaces the generated one
			c.gi--
			if c.gi >= c.gStop {
				c.gHead = c.g.ts(c.gi)
			}
		}
		c.oi--
		return true
	}
	return false
}

// peek reports the timestamp next would move to.
func (c *cursor) peek() (int64, bool) {
	gOK, oOK := c.gi >= c.gStop, c.oi >= c.oStop
	switch {
	case gOK && (!oOK || c.gHead > c.ov[c.oi].ts):
		return c.gHead, true
	case oOK:
		return c.ov[c.oi].ts, true
	}
	return 0, false
}

// remaining counts the points next has still to return.
func (c *cursor) remaining() int {
	n := max(c.gi-c.gStop+1, 0) + max(c.oi-c.oStop+1, 0)
	for k := c.oStop; k <= c.oi; k++ {
		ts := c.ov[k].ts
		i := sort.Search(c.g.total(), func(i int) bool { return c.g.ts(i) >= ts })
		if i >= c.gStop && i <= c.gi && c.g.ts(i) == ts {
			n-- // shadowed generated point
		}
	}
	return n
}

func (c *cursor) value() float64 {
	if c.fromGen {
		return c.g.value(c.idx, c.ts)
	}
	return c.ov[c.idx].value
}

func (c *cursor) appendContext(buf []byte) []byte {
	if c.fromGen {
		return c.g.appendContext(buf, c.idx)
	}
	if ctx := c.ov[c.idx].ctx; ctx != nil {
		return append(buf, ctx...)
	}
	return append(buf, ctxEmpty...)
}

func (c *cursor) createdAt() int64 {
	if c.fromGen {
		return c.g.createdAt(c.idx, c.ts)
	}
	return c.ov[c.idx].created
}

// appendFloat formats f the way encoding/json does (shortest representation,
// exponent only for very large or small magnitudes). NaN and infinities,
// which strict JSON cannot carry, become the bare tokens NaN, Infinity and
// -Infinity, as Python's json module writes them by default.
func appendFloat(buf []byte, f float64) []byte {
	// Fast path for values with at most two or six decimals (every
	// generated value and coordinate): a decimal of at most 15 significant
	// digits is the shortest representation of the double nearest to it,
	// so printing its fixed-point digits gives exactly what strconv would.
	if b, ok := appendFixed(buf, f, 100, 2); ok {
		return b
	}
	if b, ok := appendFixed(buf, f, 1e6, 6); ok {
		return b
	}
	if tok := nonFiniteToken(f); tok != "" {
		return append(buf, tok...)
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		n := len(buf)
		buf = strconv.AppendFloat(buf, f, 'e', -1, 64)
		// Like encoding/json: e-07 becomes e-7.
		if m := len(buf); m-n >= 4 && buf[m-4] == 'e' && buf[m-3] == '-' && buf[m-2] == '0' {
			buf[m-2] = buf[m-1]
			buf = buf[:m-1]
		}
		return buf
	}
	return strconv.AppendFloat(buf, f, 'f', -1, 64)
}

// appendFixed prints f with at most digits decimals when f*scale is an
// integer below 1e15 in magnitude (so at most 15 significant digits).
func appendFixed(buf []byte, f, scale float64, digits int) ([]byte, bool) {
	if !(f > -1e15/scale && f < 1e15/scale) {
		return buf, false
	}
	c := math.Round(f * scale)
	if c/scale != f || (f == 0 && math.Signbit(f)) {
		return buf, false
	}
	n := int64(c)
	if n < 0 {
		buf = append(buf, '-')
		n = -n
	}
	sc := int64(scale)
	buf = strconv.AppendInt(buf, n/sc, 10)
	frac := n % sc
	if frac == 0 {
		return buf, true
	}
	var d [8]byte
	for i := digits - 1; i >= 0; i-- {
		d[i] = byte('0' + frac%10)
		frac /= 10
	}
	end := digits
	for d[end-1] == '0' {
		end--
	}
	buf = append(buf, '.')
	return append(buf, d[:end]...), true
}

// nonFiniteToken is Python's JSON token for NaN and the infinities; "" for
// a finite f.
func nonFiniteToken(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return ""
}
