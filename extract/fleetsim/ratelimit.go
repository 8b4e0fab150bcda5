package fleetsim

import (
	"errors"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

// The per-token request limit of the hosted service this API resembles: a
// token bucket per token (429 "too many requests", without Retry-After
// unless asked), and a request budget (quota) whose exhaustion is answered
// 420 "API limit exceeded" for a while. Unlike the random 429 fault
// (Faults.RateLimitRate), these answers follow from what the client sent,
// so a client can learn the limit from them.

// StatusAPILimitExceeded is the non-standard status the service answers
// once a token's request budget is used up.
const StatusAPILimitExceeded = 420

// RateLimit configures the per-token limits. The zero value is off.
type RateLimit struct {
	// PerSecond is the rate at which each token's bucket refills, in
	// requests per second; 0 turns the bucket off.
	PerSecond float64
	// Burst is the bucket's size: how many requests a token that was idle
	// may send at once. 0 means one second's worth, ceil(PerSecond).
	Burst int
	// RetryAfter adds a Retry-After header (whole seconds until the bucket
	// holds a request again, at least 1) to the 429s; the service documents
	// none, so it is off by default.
	RetryAfter bool
	// Quota is how many requests a token may make before its budget is
	// exhausted; 0 means no quota. Once exhausted, every request of the
	// token is answered 420 for ExhaustedFor, then the budget starts over.
	Quota int
	// ExhaustedFor is how long an exhausted budget stays exhausted
	// (default 1m).
	ExhaustedFor time.Duration
}

// check reports the first invalid field of rl.
func (rl RateLimit) check() error {
	switch {
	case math.IsNaN(rl.PerSecond) || math.IsInf(rl.PerSecond, 0) || rl.PerSecond < 0:
		return errors.New("fleetsim: the rate limit must be a finite number of requests per second, 0 or more")
	case rl.Burst < 0 || rl.Quota < 0 || rl.ExhaustedFor < 0:
		return errors.New("fleetsim: burst, quota and quota-exhausted-for must not be negative")
	}
	return nil
}

func (rl RateLimit) withDefaults() RateLimit {
	if rl.Burst == 0 {
		rl.Burst = max(1, int(math.Ceil(rl.PerSecond)))
	}
	if rl.ExhaustedFor == 0 {
		rl.ExhaustedFor = time.Minute
	}
	return rl
}

// RateSecond counts, for one second of the simulator's clock, the /api/
// requests of valid tokens that the limits let through and those they
// answered 429 (bucket empty) or 420 (budget exhausted).
type RateSecond struct {
	// Unix is the second, in seconds since the epoch.
	Unix      int64 `json:"unix"`
	Admitted  int   `json:"admitted"`
	Limited   int   `json:"limited_429"`
	Exhausted int   `json:"exhausted_420"`
}

// bucket is one token's state.
type bucket struct {
	level     float64 // requests the bucket holds
	at        time.Time
	used      int       // requests admitted in the current budget
	exhausted time.Time // 420 until then
}

// limits is the simulator's per-token limit state.
type limits struct {
	mu       sync.Mutex
	cfg      RateLimit
	buckets  map[string]*bucket
	allUntil time.Time // every token exhausted until then (ExhaustAll)
	seconds  map[int64]*RateSecond
}

// verdict is the limits' answer to one request: 0 to serve it, else the
// status to answer with and, for a 429 with RetryAfter, its header.
type verdict struct {
	status     int
	retryAfter string
}

// SetRateLimit replaces the per-token limits; the buckets start full and
// the budgets from zero.
func (s *Sim) SetRateLimit(rl RateLimit) error {
	if err := rl.check(); err != nil {
		return err
	}
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	s.lim.cfg = rl.withDefaults()
	s.lim.buckets = map[string]*bucket{}
	return nil
}

// CurrentRateLimit returns the per-token limits in force, defaults filled in.
func (s *Sim) CurrentRateLimit() RateLimit {
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	return s.lim.cfg
}

// ExhaustAll answers every token's requests 420 for d from now (0 ends an
// exhaustion ExhaustAll started), whatever the quota.
func (s *Sim) ExhaustAll(d time.Duration) {
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	s.lim.allUntil = s.now().Add(d)
}

// RateStats returns the per-second counts of the limits, oldest first.
func (s *Sim) RateStats() []RateSecond {
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	out := make([]RateSecond, 0, len(s.lim.seconds))
	for _, c := range s.lim.seconds {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Unix < out[j].Unix })
	return out
}

// ResetRateStats forgets the per-second counts.
func (s *Sim) ResetRateStats() {
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	s.lim.seconds = nil
}

// admit decides, when the request arrives, whether the limits let it
// through. Requests without a valid token are not limited: they get their
// 401 as before.
func (s *Sim) admit(r *http.Request, rt *route) verdict {
	tok := r.Header.Get("X-Auth-Token")
	if tok == "" && rt != nil && rt.queryToken {
		tok = r.URL.Query().Get("token")
	}
	if _, ok := s.authenticate(tok); !ok {
		return verdict{}
	}
	now := s.now()
	l := &s.lim
	l.mu.Lock()
	defer l.mu.Unlock()
	cfg := l.cfg
	b := l.buckets[tok]
	if b == nil {
		b = &bucket{level: float64(cfg.Burst), at: now}
		if l.buckets == nil {
			l.buckets = map[string]*bucket{}
		}
		l.buckets[tok] = b
	}
	b.level = min(float64(cfg.Burst), b.level+now.Sub(b.at).Seconds()*cfg.PerSecond)
	b.at = now
	var v verdict
	switch {
	case now.Before(l.allUntil) || now.Before(b.exhausted):
		v.status = StatusAPILimitExceeded
	case cfg.PerSecond > 0 && b.level < 1:
		v.status = http.StatusTooManyRequests
		if cfg.RetryAfter {
			secs := int(math.Ceil((1 - b.level) / cfg.PerSecond))
			v.retryAfter = strconv.Itoa(max(1, secs))
		}
	default:
		if cfg.PerSecond > 0 {
			b.level--
		}
		if cfg.Quota > 0 {
			if !b.exhausted.IsZero() {
				b.used, b.exhausted = 0, time.Time{}
			}
			b.used++
			if b.used >= cfg.Quota {
				b.exhausted = now.Add(cfg.ExhaustedFor)
			}
		}
	}
	l.countLocked(now, v.status)
	return v
}

func (l *limits) countLocked(now time.Time, status int) {
	sec := now.Unix()
	c := l.seconds[sec]
	if c == nil {
		c = &RateSecond{Unix: sec}
		if l.seconds == nil {
			l.seconds = map[int64]*RateSecond{}
		}
		l.seconds[sec] = c
	}
	switch status {
	case 0:
		c.Admitted++
	case http.StatusTooManyRequests:
		c.Limited++
	default:
		c.Exhausted++
	}
}

// writeLimited answers a request the limits refused.
func writeLimited(w http.ResponseWriter, v verdict) {
	if v.status == StatusAPILimitExceeded {
		writeJSON(w, v.status, detailBody{"API limit exceeded."})
		return
	}
	if v.retryAfter != "" {
		w.Header().Set("Retry-After", v.retryAfter)
	}
	writeJSON(w, v.status, detailBody{"Request was throttled."})
}
