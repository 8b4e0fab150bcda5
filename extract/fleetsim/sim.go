// Package fleetsim is a faithful HTTP simulator of the Fleet Telemetry Service
// (both API families, /api/v2.0 and /api/v1.6, with every documented quirk),
// serving a fleet generated deterministically from a seed. fleetsync's tests,
// demo and benchmarks read it in place of the real service.
//
// Generated data points are not stored: each variable holds a small generator
// from which the timestamp, value and context of its i-th point are computed
// on demand, so a fleet of tens of millions of points costs almost no memory.
// Points added later (AddPoints, live mode) live in a small sorted overlay that
// wins over a generated point at the same timestamp.
package fleetsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // tz names are validated with time.LoadLocation; do not depend on the host's zoneinfo
)

// Options sizes the generated fleet and sets the simulator's behaviour. Zero
// durations take their defaults; zero counts mean none.
type Options struct {
	// Seed makes the generated fleet deterministic: the same options give
	// the same ids, labels, points and events.
	Seed int64
	// Devices is the number of generated devices.
	Devices int
	// Variables is the number of variables per device.
	Variables int
	// Points is the number of points per variable (some variables get a
	// few extra points older than the retention window, one is empty).
	Points int
	// Span is the time the points are spread over, ending at the start
	// time (default 24h).
	Span time.Duration
	// Retention is the account's data-retention window (default 730 days).
	Retention time.Duration
	// Tokens, OrgTokens and AccountTokens are accepted as ordinary,
	// organization-scoped and account-scoped tokens.
	Tokens, OrgTokens, AccountTokens []string
	// TokenTTL is how long a token stays valid, counted from New for the
	// tokens above and from AddToken for later ones (default 6h).
	TokenTTL time.Duration
	// Now is the clock (default time.Now). Retention, token expiry and
	// lastActivity follow it.
	Now func() time.Time
	// CountAsBool makes GET values render `count` as a boolean, as in the
	// spec's sample, so that clients can show they tolerate it.
	CountAsBool bool
	// Faults injected into /api/ responses (see SetFaults).
	Faults Faults
	// Live optionally adds new and late points while serving.
	Live LiveOptions
	// LastActivity chooses the reading of lastActivity that devices and
	// variables render (and the oracles report); the zero value is
	// LastActivityAnyWrite.
	LastActivity LastActivityMode
	// PublicURL, when set, is the scheme, host and optional path prefix
	// (e.g. "https://proxy.example/fleet") of every absolute URL the
	// simulator builds, next and previous links included, in place of the
	// request's own scheme and host, as a service behind a proxy does.
	PublicURL string
}

// Faults describes failures injected into responses on /api/ paths; the
// control interface under /_sim/ is never affected. Rates are fractions in
// [0, 1] of the requests concerned.
type Faults struct {
	// Latency is added before every response.
	Latency time.Duration
	// ErrorRate is the fraction of requests answered 500 or 503.
	ErrorRate float64
	// RateLimitRate is the fraction answered 429 with Retry-After.
	RateLimitRate float64
	// RetryAfter is the Retry-After header value of 429s, seconds or an
	// HTTP-date; empty means "1".
	RetryAfter string
	// CutRate is the fraction of Data API responses whose body is cut
	// mid-stream (the connection is closed before the body ends).
	CutRate float64
	// SlowHeaders delays the response headers of a fraction SlowRate of
	// requests, to exercise header timeouts.
	SlowHeaders time.Duration
	// SlowRate is the fraction of requests delayed by SlowHeaders.
	SlowRate float64
	// Seed makes the choice of faulty requests reproducible for a given
	// order of requests.
	Seed int64
	// RetryAfterDate sends the Retry-After of 429s in its HTTP-date form:
	// RetryAfter (then a whole number of seconds) from now, rounded up to
	// the next whole second, so clients' handling of both forms is tested.
	RetryAfterDate bool
	// Variables, when not empty, confines the faults to the Data API
	// requests that name one of these variable ids (in the path or in the
	// body's variables); every other request is served without faults. It
	// turns a rate of 1 into a persistent failure of some variables only.
	Variables []string
	// UndecodableVariables are variable ids whose raw-series cells carry
	// data no decoder accepts: value.value and value.context cells are the
	// string "n/a" and, in per-variable frames, the timestamps are 1e30.
	// The other variables of the same request are served as usual. It
	// applies to every raw-series request, whatever the rates.
	UndecodableVariables []string
	// RejectVariables are variable ids that cannot be read: a raw-series
	// request naming one of them is answered 400 {code: 400001, message,
	// detail: {variables: [...]}} naming that variable (the first one of
	// the request), whatever the rates.
	RejectVariables []string
}

// LiveOptions makes the simulator add points while it serves, as a real
// fleet does. Zero rates are off.
type LiveOptions struct {
	// PointsPerSecond is the rate of new points, each one newer than its
	// variable's newest point.
	PointsPerSecond float64
	// LatePointsPerSecond is the rate of late points: timestamps behind
	// their variable's newest point (up to LateMaxAge behind it).
	LatePointsPerSecond float64
	// LateMaxAge bounds how far behind the newest point a late point
	// lands (default 10m).
	LateMaxAge time.Duration
}

// TokenKind is the scope of an API token.
type TokenKind int

// The token kinds the service knows.
const (
	// TokenOrdinary is an ordinary API token: it cannot read organization
	// objects (403) but reads their devices and dashboards.
	TokenOrdinary TokenKind = iota
	// TokenOrganization is an organization-scoped token.
	TokenOrganization
	// TokenAccount is an account-scoped token.
	TokenAccount
)

// String names the kind as the control interface spells it.
func (k TokenKind) String() string {
	switch k {
	case TokenOrganization:
		return "organization"
	case TokenAccount:
		return "account"
	default:
		return "ordinary"
	}
}

// ParseTokenKind reads a kind spelled "ordinary", "organization" ("org") or
// "account".
func ParseTokenKind(s string) (TokenKind, error) {
	switch strings.ToLower(s) {
	case "", "ordinary":
		return TokenOrdinary, nil
	case "organization", "org":
		return TokenOrganization, nil
	case "account":
		return TokenAccount, nil
	}
	return 0, fmt.Errorf("token kind %q: want ordinary, organization or account", s)
}

// SimPoint is one data point as tests see it.
type SimPoint struct {
	TimestampMs int64   `json:"timestamp"`
	Value       float64 `json:"value"`
	// Context is the point's context object; nil means {}.
	Context map[string]any `json:"context"`
}

// Device is a snapshot of a device for test oracles.
type Device struct {
	ID           string         `json:"id"`
	Label        string         `json:"label"`
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	Tags         []string       `json:"tags"`
	Properties   map[string]any `json:"properties"`
	Organization string         `json:"organization"` // owning organization's id
	CreatedAt    time.Time      `json:"created_at"`
	// LastActivityMs is the device's lastActivity under
	// Options.LastActivity: the greatest of its variables'; 0 when it is
	// null.
	LastActivityMs int64      `json:"last_activity_ms"`
	Variables      []Variable `json:"variables"`
}

// Variable is a snapshot of a variable for test oracles.
type Variable struct {
	ID         string         `json:"id"`
	Label      string         `json:"label"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"` // temperature, humidity, battery or position
	DeviceID   string         `json:"device_id"`
	Properties map[string]any `json:"properties"`
	CreatedAt  time.Time      `json:"created_at"`
	// LastActivityMs is the variable's lastActivity (POSIX ms) under
	// Options.LastActivity, as the API renders it; 0 when it is null. By
	// default it is when a point was last written: the newest generated
	// point's timestamp, or the time of the last AddPoints, live point or
	// writer point, even a late one.
	LastActivityMs int64 `json:"last_activity_ms"`
}

// Group is a snapshot of a device group.
type Group struct {
	ID           string    `json:"id"`
	Label        string    `json:"label"`
	Name         string    `json:"name"`
	Organization string    `json:"organization"` // organization id
	Tags         []string  `json:"tags"`
	Devices      []string  `json:"devices"` // member device ids
	CreatedAt    time.Time `json:"created_at"`
}

// Organization is a snapshot of an organization.
type Organization struct {
	ID         string      `json:"id"`
	Label      string      `json:"label"`
	Name       string      `json:"name"`
	CreatedAt  time.Time   `json:"created_at"`
	Dashboards []Dashboard `json:"dashboards"`
}

// Dashboard is a snapshot of a dashboard of an organization.
type Dashboard struct {
	ID        string    `json:"id"`
	Label     string    `json:"label"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// Event is a snapshot of an event with its log history, newest log first.
type Event struct {
	ID              string    `json:"id"`
	Label           string    `json:"label"`
	Name            string    `json:"name"`
	CreatedAt       time.Time `json:"created_at"`
	LastTriggeredMs int64     `json:"last_triggered_ms"`
	// Exactly one of DeviceID and GroupID is set: the event watches
	// VariableLabel on that device or on every device of that group.
	DeviceID      string     `json:"device_id"`
	GroupID       string     `json:"group_id"`
	VariableLabel string     `json:"variable_label"`
	Logs          []EventLog `json:"logs"`
}

// EventLog is one entry of an event's log history.
type EventLog struct {
	ID         string    `json:"id"`
	CreatedAt  time.Time `json:"created_at"`
	Value      float64   `json:"value"`
	DeviceID   string    `json:"device_id"`
	VariableID string    `json:"variable_id"`
	Message    string    `json:"message"`
}

// Sim is the simulator: an http.Handler serving the whole service, plus
// control and oracle methods for tests. It is safe for concurrent use.
type Sim struct {
	opts      Options
	now       func() time.Time
	start     time.Time
	retention time.Duration
	tokenTTL  time.Duration

	mu         sync.RWMutex
	orgs       []*org
	devices    []*device
	devByID    map[string]*device
	devByLabel map[string]*device
	vars       map[string]*variable
	groups     []*group
	events     []*event
	tokens     map[string]*token
	idSeq      uint64 // ids for objects created after generation
	live       liveState

	// publicURL is Options.PublicURL without a trailing slash.
	publicURL string

	writersMu sync.Mutex
	writers   map[*Writer]struct{}

	faultMu   sync.Mutex
	faults    Faults
	faultRand *rand.Rand

	counterMu sync.Mutex
	counters  map[string]int

	// retryMu guards retryAt: per request identity, the instant before which
	// the last 429 told the client not to send it again (see retryafter.go).
	retryMu sync.Mutex
	retryAt map[string]time.Time

	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}
}

type token struct {
	kind    TokenKind
	expires time.Time
}

// New generates the fleet described by opts and returns a simulator ready to
// serve. It starts live mode when opts.Live asks for it; Close stops it.
func New(opts Options) (*Sim, error) {
	if opts.Devices < 0 || opts.Variables < 0 || opts.Points < 0 {
		return nil, errors.New("fleetsim: devices, variables and points must not be negative")
	}
	if opts.Span < 0 || opts.Retention < 0 || opts.TokenTTL < 0 {
		return nil, errors.New("fleetsim: span, retention and token TTL must not be negative")
	}
	if opts.Span == 0 {
		opts.Span = 24 * time.Hour
	}
	if opts.Retention == 0 {
		opts.Retention = 730 * 24 * time.Hour
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = 6 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Points > 0 && opts.Span.Milliseconds() < int64(opts.Points) {
		return nil, fmt.Errorf("fleetsim: %d points do not fit in a span of %s at one point per millisecond", opts.Points, opts.Span)
	}
	if err := checkFaults(opts.Faults); err != nil {
		return nil, err
	}
	if opts.LastActivity < LastActivityAnyWrite || opts.LastActivity > LastActivityNone {
		return nil, fmt.Errorf("fleetsim: unknown last activity mode %d", int(opts.LastActivity))
	}
	public, err := checkPublicURL(opts.PublicURL)
	if err != nil {
		return nil, err
	}
	s := &Sim{
		opts:      opts,
		now:       opts.Now,
		start:     opts.Now(),
		retention: opts.Retention,
		tokenTTL:  opts.TokenTTL,
		tokens:    map[string]*token{},
		counters:  map[string]int{},
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		publicURL: public,
		writers:   map[*Writer]struct{}{},
	}
	s.setFaults(opts.Faults)
	expires := s.start.Add(s.tokenTTL)
	for _, t := range opts.Tokens {
		s.tokens[t] = &token{kind: TokenOrdinary, expires: expires}
	}
	for _, t := range opts.OrgTokens {
		s.tokens[t] = &token{kind: TokenOrganization, expires: expires}
	}
	for _, t := range opts.AccountTokens {
		s.tokens[t] = &token{kind: TokenAccount, expires: expires}
	}
	s.generate()
	if opts.Live.PointsPerSecond > 0 || opts.Live.LatePointsPerSecond > 0 {
		go s.runLive()
	} else {
		close(s.done)
	}
	return s, nil
}

// Close stops live mode and every writer still running. The handler keeps
// serving the data as it is.
func (s *Sim) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	s.writersMu.Lock()
	ws := make([]*Writer, 0, len(s.writers))
	for w := range s.writers {
		ws = append(ws, w)
	}
	s.writersMu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// checkPublicURL validates Options.PublicURL and drops its trailing slash.
func checkPublicURL(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	u, err := url.Parse(v)
	if err != nil {
		return "", fmt.Errorf("fleetsim: public URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("fleetsim: public URL %q: want http(s)://host[:port][/prefix] without query, fragment or user", v)
	}
	return strings.TrimRight(v, "/"), nil
}

func checkFaults(f Faults) error {
	for name, r := range map[string]float64{"error rate": f.ErrorRate, "rate-limit rate": f.RateLimitRate, "cut rate": f.CutRate, "slow rate": f.SlowRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("fleetsim: %s %v is not a fraction in [0, 1]", name, r)
		}
	}
	if f.Latency < 0 || f.SlowHeaders < 0 {
		return errors.New("fleetsim: fault delays must not be negative")
	}
	if f.RetryAfterDate {
		if _, err := retryAfterSeconds(f.RetryAfter); err != nil {
			return fmt.Errorf("fleetsim: retry after as a date: %w", err)
		}
	}
	return nil
}

// SetFaults replaces the injected faults; the zero Faults turns them off.
// Invalid rates are clamped to [0, 1].
func (s *Sim) SetFaults(f Faults) {
	clamp := func(x float64) float64 { return min(max(x, 0), 1) }
	f.ErrorRate, f.RateLimitRate, f.CutRate, f.SlowRate = clamp(f.ErrorRate), clamp(f.RateLimitRate), clamp(f.CutRate), clamp(f.SlowRate)
	f.Latency, f.SlowHeaders = max(f.Latency, 0), max(f.SlowHeaders, 0)
	s.setFaults(f)
}

func (s *Sim) setFaults(f Faults) {
	f = f.clone()
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.faults = f
	s.faultRand = rand.New(rand.NewSource(f.Seed))
}

// CurrentFaults returns the faults in force.
func (s *Sim) CurrentFaults() Faults {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.faults.clone()
}

// clone copies f with its own id lists.
func (f Faults) clone() Faults {
	f.Variables = append([]string(nil), f.Variables...)
	f.UndecodableVariables = append([]string(nil), f.UndecodableVariables...)
	f.RejectVariables = append([]string(nil), f.RejectVariables...)
	return f
}

// AddToken accepts token as a token of the given kind for ttl from now
// (ttl <= 0 means the configured TokenTTL). Adding an existing token renews it.
func (s *Sim) AddToken(tok string, kind TokenKind, ttl time.Duration) {
	if ttl <= 0 {
		ttl = s.tokenTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[tok] = &token{kind: kind, expires: s.now().Add(ttl)}
}

// ExpireTokens makes every current token expired; tokens added later are
// valid again.
func (s *Sim) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, t := range s.tokens {
		t.expires = now
	}
}

// authenticate returns the kind of a valid token.
func (s *Sim) authenticate(tok string) (TokenKind, bool) {
	if tok == "" {
		return 0, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tokens[tok]
	if !ok || !s.now().Before(t.expires) {
		return 0, false
	}
	return t.kind, true
}

// Counters returns how many requests were answered, keyed by
// "METHOD endpoint-pattern status", e.g. "POST /api/v1.6/data/raw/series 200".
// Responses cut by a fault are also counted under "cut METHOD pattern".
func (s *Sim) Counters() map[string]int {
	s.counterMu.Lock()
	defer s.counterMu.Unlock()
	out := make(map[string]int, len(s.counters))
	for k, v := range s.counters {
		out[k] = v
	}
	return out
}

// ResetCounters sets every counter back to zero.
func (s *Sim) ResetCounters() {
	s.counterMu.Lock()
	defer s.counterMu.Unlock()
	s.counters = map[string]int{}
}

func (s *Sim) count(key string) {
	s.counterMu.Lock()
	s.counters[key]++
	s.counterMu.Unlock()
}

// RetentionFloor is the oldest instant a data read may reach: Now minus the
// retention window.
func (s *Sim) RetentionFloor() time.Time { return s.now().Add(-s.retention) }

// StartTime is when the simulator was created; generated points end there.
func (s *Sim) StartTime() time.Time { return s.start }

func (s *Sim) floorMs() int64 { return s.RetentionFloor().UnixMilli() }

// Devices returns a snapshot of every device with its variables, in list order.
func (s *Sim) Devices() []Device {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Device, 0, len(s.devices))
	for _, d := range s.devices {
		out = append(out, s.deviceSnapshot(d))
	}
	return out
}

func (s *Sim) deviceSnapshot(d *device) Device {
	out := Device{
		ID: d.id, Label: d.label, Name: d.name, Description: d.description,
		Tags: append([]string(nil), d.tags...), Properties: cloneMap(d.properties),
		Organization: d.org.id, CreatedAt: d.createdAt,
	}
	for _, v := range d.vars {
		out.Variables = append(out.Variables, s.varSnapshot(v))
	}
	out.LastActivityMs, _ = s.deviceActivity(d)
	return out
}

func (s *Sim) varSnapshot(v *variable) Variable {
	la, _ := s.varActivity(v)
	return Variable{
		ID: v.id, Label: v.label, Name: v.name, Kind: v.kind.String(), DeviceID: v.dev.id,
		Properties: cloneMap(v.properties), CreatedAt: v.createdAt, LastActivityMs: la,
	}
}

// Points returns every point of the variable, including those outside the
// retention window, sorted by timestamp; nil when the variable is unknown.
func (s *Sim) Points(variableID string) []SimPoint {
	s.mu.RLock()
	v, ok := s.vars[variableID]
	var ser series
	if ok {
		ser = v.ser
	}
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	c := ser.cursor(minTs, maxTs)
	out := make([]SimPoint, 0, c.remaining())
	var buf []byte
	for c.next() {
		p := SimPoint{TimestampMs: c.ts, Value: c.value()}
		buf = c.appendContext(buf[:0])
		if len(buf) > 2 {
			_ = json.Unmarshal(buf, &p.Context)
		}
		out = append(out, p)
	}
	// The cursor runs newest first; oracles want ascending order.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// PointCount is the number of points the variable holds, including those
// outside the retention window; -1 when the variable is unknown.
func (s *Sim) PointCount(variableID string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.vars[variableID]
	if !ok {
		return -1
	}
	c := v.ser.cursor(minTs, maxTs)
	return c.remaining()
}

// PointCountBetween is the number of points of the variable with
// fromMs <= timestamp <= toMs, without materialising them (for oracles over
// big fleets); -1 when the variable is unknown.
func (s *Sim) PointCountBetween(variableID string, fromMs, toMs int64) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.vars[variableID]
	if !ok {
		return -1
	}
	c := v.ser.cursor(fromMs, toMs)
	return c.remaining()
}

// Groups returns a snapshot of every device group.
func (s *Sim) Groups() []Group {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Group, 0, len(s.groups))
	for _, g := range s.groups {
		out = append(out, g.snapshot())
	}
	return out
}

func (g *group) snapshot() Group {
	out := Group{ID: g.id, Label: g.label, Name: g.name, Organization: g.org.id, Tags: append([]string(nil), g.tags...), CreatedAt: g.createdAt}
	for _, d := range g.members {
		out.Devices = append(out.Devices, d.id)
	}
	return out
}

// Organizations returns a snapshot of every organization.
func (s *Sim) Organizations() []Organization {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Organization, 0, len(s.orgs))
	for _, o := range s.orgs {
		so := Organization{ID: o.id, Label: o.label, Name: o.name, CreatedAt: o.createdAt}
		for _, d := range o.dashboards {
			so.Dashboards = append(so.Dashboards, Dashboard{ID: d.id, Label: d.label, Name: d.name, CreatedAt: d.createdAt})
		}
		out = append(out, so)
	}
	return out
}

// Events returns a snapshot of every event with its logs (newest first).
func (s *Sim) Events() []Event {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Event, 0, len(s.events))
	for _, e := range s.events {
		se := Event{ID: e.id, Label: e.label, Name: e.name, CreatedAt: e.createdAt, LastTriggeredMs: e.lastTriggered, VariableLabel: e.varLabel, Logs: append([]EventLog(nil), e.logs...)}
		if e.device != nil {
			se.DeviceID = e.device.id
		}
		if e.group != nil {
			se.GroupID = e.group.id
		}
		out = append(out, se)
	}
	return out
}

// AddPoints adds points to a variable: new points, late points behind its
// newest, or replacements of points at existing timestamps (one point per
// timestamp). Every point is written at Now(): that is its created_at, and
// under LastActivityAnyWrite the variable's lastActivity becomes Now(), even
// for late points. Values may be NaN or infinite; the JSON outputs render
// them as NaN, Infinity and -Infinity.
func (s *Sim) AddPoints(variableID string, pts []SimPoint) error {
	if len(pts) == 0 {
		return nil
	}
	enc := make([]overlayPoint, 0, len(pts))
	now := s.now().UnixMilli()
	for _, p := range pts {
		op := overlayPoint{ts: p.TimestampMs, value: p.Value, created: now}
		if len(p.Context) > 0 {
			b, err := json.Marshal(p.Context)
			if err != nil {
				return fmt.Errorf("add points to %s: context of point %d: %w", variableID, p.TimestampMs, err)
			}
			op.ctx = b
		}
		enc = append(enc, op)
	}
	sort.SliceStable(enc, func(i, j int) bool { return enc[i].ts < enc[j].ts })
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[variableID]
	if !ok {
		return fmt.Errorf("add points: %w: variable %s", ErrNotFound, variableID)
	}
	for _, op := range enc {
		v.ser.insert(op)
	}
	v.noteWrite(now)
	return nil
}

// DeleteVariable removes a variable and its data from its device and from
// every list; ErrNotFound when the id is unknown.
func (s *Sim) DeleteVariable(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[id]
	if !ok {
		return fmt.Errorf("delete variable %q: %w", id, ErrNotFound)
	}
	delete(s.vars, id)
	d := v.dev
	out := make([]*variable, 0, len(d.vars))
	for _, x := range d.vars {
		if x != v {
			out = append(out, x)
		}
	}
	d.vars = out
	return nil
}

// ErrNotFound is returned by the control methods for an unknown object.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a label is already taken.
var ErrConflict = errors.New("label already taken")

// DeleteDevice removes a device (by id or ~label) with its variables and
// data, and takes it out of every group.
func (s *Sim) DeleteDevice(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.lookupDevice(key)
	if d == nil {
		return fmt.Errorf("delete device %q: %w", key, ErrNotFound)
	}
	delete(s.devByID, d.id)
	delete(s.devByLabel, d.label)
	for _, v := range d.vars {
		delete(s.vars, v.id)
	}
	s.devices = removeDevice(s.devices, d)
	d.org.devices = removeDevice(d.org.devices, d)
	for _, g := range s.groups {
		g.members = removeDevice(g.members, d)
	}
	return nil
}

func removeDevice(list []*device, d *device) []*device {
	out := list[:0:0]
	for _, x := range list {
		if x != d {
			out = append(out, x)
		}
	}
	return out
}

// AddDevice creates a device in the first organization with the given
// number of empty variables (kinds cycling as in the generated fleet).
func (s *Sim) AddDevice(label string, variables int) (Device, error) {
	if label == "" || strings.ContainsAny(label, "/") || strings.HasPrefix(label, "~") {
		return Device{}, fmt.Errorf("add device: label %q must be non-empty, without '/' and not start with '~'", label)
	}
	if variables < 0 {
		return Device{}, fmt.Errorf("add device %q: negative variable count %d", label, variables)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.devByLabel[label]; ok {
		return Device{}, fmt.Errorf("add device %q: %w", label, ErrConflict)
	}
	if len(s.orgs) == 0 {
		return Device{}, errors.New("add device: no organization")
	}
	now := s.now().UTC()
	d := &device{
		id: s.newID(), label: label, name: label, org: s.orgs[0],
		properties: map[string]any{}, tags: []string{}, createdAt: now,
	}
	for j := 0; j < variables; j++ {
		k := kind(j % int(numKinds))
		v := &variable{
			id: s.newID(), label: varLabel(k, j), name: k.title(), kind: k, dev: d,
			properties: map[string]any{"_color": k.color()}, createdAt: now,
		}
		d.vars = append(d.vars, v)
		s.vars[v.id] = v
	}
	s.devices = append(s.devices, d)
	s.devByID[d.id] = d
	s.devByLabel[d.label] = d
	d.org.devices = append(d.org.devices, d)
	return s.deviceSnapshot(d), nil
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
