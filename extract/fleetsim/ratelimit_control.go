package fleetsim

import (
	"fmt"
	"net/http"
	"time"
)

// rateLimitJSON is RateLimit on the control interface, durations as Go
// duration strings.
type rateLimitJSON struct {
	RateLimit         float64 `json:"rate_limit"`
	Burst             int     `json:"burst"`
	RetryAfter        bool    `json:"retry_after"`
	Quota             int     `json:"quota"`
	QuotaExhaustedFor string  `json:"quota_exhausted_for"`
}

// controlRateLimit serves /_sim/ratelimit and below; seg is the path after
// "ratelimit".
func (s *Sim) controlRateLimit(r *http.Request, seg []string) (any, int, error) {
	m := r.Method
	notAllowed := &controlError{status: http.StatusMethodNotAllowed, msg: fmt.Sprintf("%s not allowed on %s", m, r.URL.Path)}
	switch {
	case len(seg) == 0:
		switch m {
		case http.MethodGet:
			rl := s.CurrentRateLimit()
			return rateLimitJSON{RateLimit: rl.PerSecond, Burst: rl.Burst, RetryAfter: rl.RetryAfter,
				Quota: rl.Quota, QuotaExhaustedFor: rl.ExhaustedFor.String()}, http.StatusOK, nil
		case http.MethodPut, http.MethodPost:
			var b rateLimitJSON
			if err := decodeStrict(r, &b); err != nil {
				return nil, 0, err
			}
			rl := RateLimit{PerSecond: b.RateLimit, Burst: b.Burst, RetryAfter: b.RetryAfter, Quota: b.Quota}
			if b.QuotaExhaustedFor != "" {
				d, err := time.ParseDuration(b.QuotaExhaustedFor)
				if err != nil {
					return nil, 0, badRequest("quota_exhausted_for: %v", err)
				}
				rl.ExhaustedFor = d
			}
			if err := s.SetRateLimit(rl); err != nil {
				return nil, 0, badRequest("%v", err)
			}
			return nil, http.StatusNoContent, nil
		case http.MethodDelete:
			_ = s.SetRateLimit(RateLimit{})
			s.ExhaustAll(0)
			return nil, http.StatusNoContent, nil
		}
	case len(seg) == 1 && seg[0] == "exhaust":
		if m != http.MethodPost {
			return nil, 0, notAllowed
		}
		var b struct {
			For string `json:"for"`
		}
		if err := decodeStrict(r, &b); err != nil {
			return nil, 0, err
		}
		d, err := time.ParseDuration(b.For)
		if err != nil || d < 0 {
			return nil, 0, badRequest("for: want a duration of 0 or more, e.g. \"30s\"")
		}
		s.ExhaustAll(d)
		return nil, http.StatusNoContent, nil
	case len(seg) == 1 && seg[0] == "stats":
		switch m {
		case http.MethodGet:
			return s.RateStats(), http.StatusOK, nil
		case http.MethodDelete:
			s.ResetRateStats()
			return nil, http.StatusNoContent, nil
		}
	default:
		return nil, 0, &controlError{status: http.StatusNotFound, msg: "unknown control endpoint " + r.URL.Path}
	}
	return nil, 0, notAllowed
}
