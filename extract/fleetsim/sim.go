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
	"errors"
	"fmt"
	"math/rand"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	_ "time/tzdata" // tz names are validated with time.LoadLocation; do not depend on the host's zoneinfo
)

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
	// rowsServed counts the points raw-series responses carried (see
	// RowsServed); ResetCounters zeroes it.
	rowsServed atomic.Int64

	// retryMu guards retryAt: per request identity, the instant before which
	// the last 429 told the client not to send it again (see retryafter.go).
	retryMu sync.Mutex
	retryAt map[string]time.Time

	// lim holds the per-token limits (see ratelimit.go).
	lim limits

	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}
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
	if err := opts.SeriesOrder.check(); err != nil {
		return nil, err
	}
	if opts.ContextBytes < 0 || opts.ContextBytes > maxContextBytes {
		return nil, fmt.Errorf("fleetsim: context bytes %d: want 0 (off) to %d", opts.ContextBytes, maxContextBytes)
	}
	if err := opts.RateLimit.check(); err != nil {
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
	s.lim.cfg = opts.RateLimit.withDefaults()
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

// RetentionFloor is the oldest instant a data read may reach: Now minus the
// retention window.
func (s *Sim) RetentionFloor() time.Time { return s.now().Add(-s.retention) }

// StartTime is when the simulator was created; generated points end there.
func (s *Sim) StartTime() time.Time { return s.start }

func (s *Sim) floorMs() int64 { return s.RetentionFloor().UnixMilli() }
