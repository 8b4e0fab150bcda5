package fleetsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Retry-After bookkeeping and variable-scoped faults.
//
// When a 429 fault answers a request, the simulator remembers the instant its
// Retry-After named, keyed by the request's identity (method, path, query and
// body; the token is not part of it). A later identical request that arrives
// before that instant is counted under "early METHOD pattern" in Counters:
// a client that honours Retry-After never produces one. Any other answer to
// the request forgets the instant.

// requestInfo is what the fault layer needs to know of an /api/ request.
type requestInfo struct {
	// key identifies the request for the Retry-After bookkeeping; empty when
	// the bookkeeping is off.
	key string
	// body is the request body, read ahead (nil for none).
	body []byte
}

// retryAfterSeconds reads a Retry-After given as whole seconds ("" is 1).
func retryAfterSeconds(v string) (int, error) {
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("retry after %q is not a whole number of seconds", v)
	}
	return n, nil
}

// retryAfterValue renders the Retry-After header of a 429 sent at now and the
// instant it names; ok is false when the value names no instant we can tell
// (an arbitrary string set through SetFaults).
func retryAfterValue(f Faults, now time.Time) (header string, deadline time.Time, ok bool) {
	v := f.RetryAfter
	if v == "" {
		v = "1"
	}
	if f.RetryAfterDate {
		secs, err := retryAfterSeconds(v)
		if err != nil {
			return v, time.Time{}, false
		}
		at := now.Add(time.Duration(secs) * time.Second)
		if t := at.Truncate(time.Second); !t.Equal(at) {
			at = t.Add(time.Second)
		}
		return at.UTC().Format(http.TimeFormat), at, true
	}
	if secs, err := retryAfterSeconds(v); err == nil {
		return v, now.Add(time.Duration(secs) * time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return v, t, true
	}
	return v, time.Time{}, false
}

// inspect reads the request body ahead when the fault layer needs it (for
// the Retry-After bookkeeping or variable-scoped faults) and puts it back
// for the handler.
func (s *Sim) inspect(r *http.Request, f Faults) requestInfo {
	s.retryMu.Lock()
	pending := len(s.retryAt) > 0
	s.retryMu.Unlock()
	track := f.RateLimitRate > 0 || pending
	if !track && len(f.Variables) == 0 {
		return requestInfo{}
	}
	var info requestInfo
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBodySize))
		if err == nil {
			info.body = b
		}
		r.Body = io.NopCloser(bytes.NewReader(info.body))
	}
	if track {
		info.key = r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery + "\n" + string(info.body)
	}
	return info
}

// arrivedEarly reports whether the request arrived before the Retry-After
// instant the simulator gave its previous identical request.
func (s *Sim) arrivedEarly(info requestInfo) bool {
	if info.key == "" {
		return false
	}
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	at, ok := s.retryAt[info.key]
	return ok && s.now().Before(at)
}

// noteAnswer records the Retry-After instant of a 429 (deadline non-zero)
// or forgets it after any other answer.
func (s *Sim) noteAnswer(info requestInfo, deadline time.Time) {
	if info.key == "" {
		return
	}
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	if deadline.IsZero() {
		delete(s.retryAt, info.key)
		return
	}
	if s.retryAt == nil {
		s.retryAt = map[string]time.Time{}
	}
	s.retryAt[info.key] = deadline
}

// namesVariable reports whether a Data API request names one of ids: the
// variable in the path of values and statistics, or an entry of the body's
// variables list of aggregation and raw series.
func namesVariable(rt *route, params []string, body []byte, ids []string) bool {
	if rt == nil || !rt.data {
		return false
	}
	var named []string
	switch rt {
	case rValues, rStatistics:
		named = params[:1]
	default:
		var b struct {
			Variables []string `json:"variables"`
		}
		if json.Unmarshal(body, &b) != nil {
			return false
		}
		named = b.Variables
	}
	for _, n := range named {
		for _, id := range ids {
			if n == id {
				return true
			}
		}
	}
	return false
}
