package fleetsim

import (
	"fmt"
	"math"
	"time"
)

// The objects of the simulated account. They are guarded by Sim.mu.

type org struct {
	id, label, name string
	createdAt       time.Time
	devices         []*device
	dashboards      []*dashboard
}

type dashboard struct {
	id, label, name string
	createdAt       time.Time
}

type device struct {
	id, label, name, description string
	properties                   map[string]any
	tags                         []string
	org                          *org
	createdAt                    time.Time
	vars                         []*variable
}

type variable struct {
	id, label, name string
	kind            kind
	dev             *device
	properties      map[string]any
	createdAt       time.Time
	// lastWrite is when a point was last written (POSIX ms), valid when
	// written is set; the other lastActivity readings derive from ser.
	lastWrite int64
	written   bool
	ser       series
}

type group struct {
	id, label, name string
	org             *org
	tags            []string
	members         []*device
	createdAt       time.Time
}

type event struct {
	id, label, name string
	createdAt       time.Time
	lastTriggered   int64
	device          *device
	group           *group
	varLabel        string
	logs            []EventLog // newest first
}

// kind is what a variable measures; it decides its values and context.
type kind int

const (
	kindTemperature kind = iota
	kindHumidity
	kindBattery
	kindPosition
	numKinds
)

func (k kind) String() string {
	return [...]string{"temperature", "humidity", "battery", "position"}[k]
}

func (k kind) title() string {
	return [...]string{"Temperature", "Humidity", "Battery", "Position"}[k]
}

func (k kind) color() string {
	return [...]string{"#e53935", "#1e88e5", "#43a047", "#8e24aa"}[k]
}

func (k kind) unit() string {
	return [...]string{"°C", "%", "%", "m"}[k]
}

// varLabel names the j-th variable of a device: the kind, then a suffix once
// the kinds repeat, so labels stay unique within the device.
func varLabel(k kind, j int) string {
	if j < int(numKinds) {
		return k.String()
	}
	return fmt.Sprintf("%s-%d", k, j/int(numKinds)+1)
}

// splitmix64 is the hash behind every generated quantity: fast, stateless,
// and good enough that neighbouring indexes look unrelated.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func mix(a, b uint64) uint64 { return splitmix64(a ^ splitmix64(b)) }

// unit01 maps a hash to [0, 1).
func unit01(h uint64) float64 { return float64(h>>11) / (1 << 53) }

func round(x float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(x*p) / p
}

// newID returns a fresh object id for objects created after generation.
// Caller holds s.mu.
func (s *Sim) newID() string {
	for {
		s.idSeq++
		id := hexID(mix(uint64(s.opts.Seed), 0xc0ffee), s.idSeq)
		if !s.idTaken(id) {
			return id
		}
	}
}

func (s *Sim) idTaken(id string) bool {
	if _, ok := s.devByID[id]; ok {
		return true
	}
	if _, ok := s.vars[id]; ok {
		return true
	}
	for _, g := range s.groups {
		if g.id == id {
			return true
		}
	}
	return false
}

// hexID makes a 24-hex-digit object id, like the service's.
func hexID(ns, n uint64) string {
	h1 := mix(ns, n)
	h2 := mix(h1, n+1)
	return fmt.Sprintf("%016x%08x", h1, uint32(h2))
}

type idMaker struct {
	seed uint64
	seen map[string]bool
}

func (m *idMaker) id(ns string, n int) string {
	var nsh uint64
	for _, c := range ns {
		nsh = mix(nsh, uint64(c))
	}
	for salt := uint64(0); ; salt++ {
		id := hexID(mix(m.seed, nsh+salt<<32), uint64(n))
		if !m.seen[id] {
			m.seen[id] = true
			return id
		}
	}
}

var deviceModels = []string{"TR-200", "TR-310", "LG-40", "GW-7"}
var cities = []struct {
	name     string
	lat, lng float64
}{
	{"Lisboa", 38.7223, -9.1393}, {"München", 48.1351, 11.5820}, {"Zürich", 47.3769, 8.5417},
	{"Bogotá", 4.7110, -74.0721}, {"Osaka", 34.6937, 135.5023}, {"Oslo", 59.9139, 10.7522},
}

// deviceLabel gives the generated labels; device 1 carries a unicode label
// with a space and device 2 one with spaces, so clients meet both whenever
// the fleet has them.
func deviceLabel(i int) string {
	switch i {
	case 1:
		return fmt.Sprintf("kühlwagen münchen-%04d", i)
	case 2:
		return fmt.Sprintf("trailer north %04d", i)
	}
	return fmt.Sprintf("tracker-%04d", i)
}

const dayMs = 24 * 3600 * 1000

// generate builds the account from the options. Everything derives from the
// seed and the start time.
func (s *Sim) generate() {
	o := s.opts
	seed := uint64(o.Seed)
	ids := &idMaker{seed: seed, seen: map[string]bool{}}
	t0 := s.start
	t0ms := t0.UnixMilli()
	spanMs := o.Span.Milliseconds()
	created := func(ns string, i int, before time.Duration) time.Time {
		// Metadata was created some days before the data begins.
		jit := time.Duration(mix(seed, uint64(i)*7919+uint64(len(ns)))%uint64(24*3600)) * time.Second
		return t0.Add(-o.Span - before - jit).UTC().Truncate(time.Microsecond)
	}

	s.devByID = map[string]*device{}
	s.devByLabel = map[string]*device{}
	s.vars = map[string]*variable{}

	nOrgs := 2 + o.Devices/500
	for i := 0; i < nOrgs; i++ {
		og := &org{id: ids.id("org", i), label: fmt.Sprintf("org-%02d", i), name: fmt.Sprintf("Organization %d", i), createdAt: created("org", i, 400*24*time.Hour)}
		for k := 0; k < 2; k++ {
			og.dashboards = append(og.dashboards, &dashboard{
				id: ids.id("dash", i*2+k), label: fmt.Sprintf("%s-dashboard-%d", og.label, k),
				name: fmt.Sprintf("%s dashboard %d", og.name, k), createdAt: created("dash", i*2+k, 300*24*time.Hour),
			})
		}
		s.orgs = append(s.orgs, og)
	}

	step := int64(1)
	if o.Points > 0 {
		step = max(spanMs/int64(o.Points), 1)
	}
	oldBase := min(t0ms-o.Retention.Milliseconds(), t0ms-spanMs) - 3600*1000
	gvi := 0 // global variable index
	for i := 0; i < o.Devices; i++ {
		og := s.orgs[i%nOrgs]
		city := cities[i%len(cities)]
		d := &device{
			id: ids.id("dev", i), label: deviceLabel(i), org: og,
			name:        fmt.Sprintf("Vehicle %d (%s)", i, city.name),
			description: fmt.Sprintf("Generated device %d", i),
			properties: map[string]any{
				"model": deviceModels[i%len(deviceModels)], "city": city.name,
				"serial": fmt.Sprintf("SN-%08d", mix(seed, uint64(i))%100000000),
			},
			tags:      []string{fmt.Sprintf("fleet-%c", 'a'+rune(i%3)), []string{"refrigerated", "dry", "tank"}[i%3]},
			createdAt: created("dev", i, 30*24*time.Hour),
		}
		for j := 0; j < o.Variables; j++ {
			k := kind(j % int(numKinds))
			v := &variable{
				id: ids.id("var", gvi), label: varLabel(k, j), name: k.title(), kind: k, dev: d,
				properties: map[string]any{"_color": k.color(), "unit": k.unit()},
				createdAt:  created("var", gvi, 29*24*time.Hour),
			}
			g := genSpec{
				kind: k, n: o.Points, endMs: t0ms, stepMs: step, oldBase: oldBase,
				tseed:    mix(seed, uint64(i)<<20|uint64(j%2)),
				vseed:    mix(seed^0x5eed, uint64(gvi)),
				phase:    unit01(mix(seed, uint64(gvi)+99)) * 2 * math.Pi,
				lat:      city.lat + (unit01(mix(seed, uint64(gvi)+7))-0.5)*0.2,
				lng:      city.lng + (unit01(mix(seed, uint64(gvi)+8))-0.5)*0.2,
				lastMs:   t0ms,
				ctxBytes: o.ContextBytes,
			}
			if step >= 2 {
				g.jitter = step / 2
			}
			if o.Points > 0 && gvi%5 == 2 {
				g.nOld = 3 // a few points behind the retention window
			}
			if i == 1 && j == o.Variables-1 {
				g.n, g.nOld = 0, 0 // the fleet's empty variable
			}
			v.ser.gen = g
			if g.n+g.nOld > 0 {
				c := v.ser.cursor(minTs, maxTs)
				if c.next() {
					// The newest generated point is the last one
					// written: every created_at is clamped to it.
					v.noteWrite(c.createdAt())
				}
			}
			d.vars = append(d.vars, v)
			s.vars[v.id] = v
			gvi++
		}
		s.devices = append(s.devices, d)
		s.devByID[d.id] = d
		s.devByLabel[d.label] = d
		og.devices = append(og.devices, d)
	}

	// Two groups per organization: every second device of it, and every
	// third; the second group of the last organization is left empty.
	for oi, og := range s.orgs {
		for k := 0; k < 2; k++ {
			gi := oi*2 + k
			g := &group{
				id: ids.id("grp", gi), label: fmt.Sprintf("%s-group-%d", og.label, k), name: fmt.Sprintf("%s group %d", og.name, k),
				org: og, tags: []string{fmt.Sprintf("zone-%d", k)}, createdAt: created("grp", gi, 20*24*time.Hour),
			}
			if !(oi == len(s.orgs)-1 && k == 1) {
				for di, d := range og.devices {
					if di%(k+2) == 0 {
						g.members = append(g.members, d)
					}
				}
			}
			s.groups = append(s.groups, g)
		}
	}

	// Events: one per device watching its first variable (up to 20), and
	// one per group watching its temperature. The first event has a long
	// log history so that cursor paging has several pages.
	ne := 0
	addEvent := func(e *event) {
		e.id = ids.id("evt", ne)
		e.createdAt = created("evt", ne, 10*24*time.Hour)
		nLogs := int(mix(seed, uint64(ne)+555) % 12)
		if ne == 0 {
			nLogs = 25
		}
		var vid, did string
		if e.device != nil && len(e.device.vars) > 0 {
			did, vid = e.device.id, e.device.vars[0].id
		} else if e.group != nil && len(e.group.members) > 0 {
			did = e.group.members[0].id
			if len(e.group.members[0].vars) > 0 {
				vid = e.group.members[0].vars[0].id
			}
		}
		for l := 0; l < nLogs; l++ {
			// Logs spread over the span, newest first.
			at := t0.Add(-time.Duration(l+1) * o.Span / time.Duration(nLogs+1)).UTC().Truncate(time.Millisecond)
			val := round(20+10*unit01(mix(seed, uint64(ne*1000+l))), 2)
			e.logs = append(e.logs, EventLog{
				ID: ids.id("log", ne*1000+l), CreatedAt: at, Value: val, DeviceID: did, VariableID: vid,
				Message: fmt.Sprintf("%s above threshold: %v", e.varLabel, val),
			})
		}
		if len(e.logs) > 0 {
			e.lastTriggered = e.logs[0].CreatedAt.UnixMilli()
		}
		s.events = append(s.events, e)
		ne++
	}
	for i, d := range s.devices {
		if i >= 20 || len(d.vars) == 0 {
			break
		}
		addEvent(&event{label: fmt.Sprintf("alert-%s", d.vars[0].label+"-"+fmt.Sprint(i)), name: fmt.Sprintf("%s alert on device %d", d.vars[0].name, i), device: d, varLabel: d.vars[0].label})
	}
	for _, g := range s.groups {
		addEvent(&event{label: fmt.Sprintf("alert-%s", g.label), name: fmt.Sprintf("Temperature alert on %s", g.name), group: g, varLabel: "temperature"})
	}
	s.idSeq = uint64(len(ids.seen))
}
