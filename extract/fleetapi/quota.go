package fleetapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// A 420 "API limit exceeded" says the token's request budget is used up:
// unlike a 429, no request of the token will succeed for a while, whoever
// sends it. The Client therefore pauses every request (not only the one
// that got it) for a long wait, and counts the streak of 420s as a whole
// against the retry budget: once the budget has been exhausted for longer
// than MaxElapsed, calls fail at once while the pause lasts, so that a cycle
// ends promptly with its progress kept, and the next request after the
// pause finds out whether the budget is back.

// quotaState is the current streak of 420s.
type quotaState struct {
	mu    sync.Mutex
	since time.Time // the streak's first 420; zero when none
	until time.Time // the pause in force
	last  *APIError
}

// IsAPILimitExceeded reports whether err is the service's 420: the token's
// request budget is used up.
func IsAPILimitExceeded(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == StatusAPILimitExceeded
}

// observeLimit passes an answer's status and Retry-After to the limiter and
// counts the rate-limit answers.
func (c *Client) observeLimit(resp *http.Response) time.Time {
	var retryAt time.Time
	if resp.StatusCode >= 400 {
		retryAt, _ = parseRetryAfter(resp.Header.Get("Retry-After"), c.now())
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, StatusAPILimitExceeded:
		c.m.limited.WithLabelValues(strconv.Itoa(resp.StatusCode)).Inc()
	default:
		c.quota.mu.Lock()
		c.quota.since = time.Time{}
		c.quota.mu.Unlock()
	}
	c.lim.Observe(resp.StatusCode, retryAt)
	return retryAt
}

// quotaWait is the wait after a 420: at least the retry policy's, and at
// least a quarter of the retry budget up to BackoffMax, so that a budget
// that does not come back is tried a few times, slowly, before the call
// gives up.
func (c *Client) quotaWait(wait time.Duration) time.Duration {
	return max(wait, min(c.cfg.BackoffMax, c.cfg.MaxElapsed/4))
}

// exhausted notes a 420 that a call will wait out for wait; it pauses every
// request until then, logs the pause once, and returns when the streak
// began.
func (c *Client) exhausted(ae *APIError, wait time.Duration) time.Time {
	now := c.now()
	until := now.Add(wait)
	c.quota.mu.Lock()
	if c.quota.since.IsZero() {
		c.quota.since = now
	}
	newPause := !now.Before(c.quota.until)
	if until.After(c.quota.until) {
		c.quota.until = until
	}
	c.quota.last = ae
	since := c.quota.since
	c.quota.mu.Unlock()
	c.lim.Pause(until)
	if newPause {
		c.log.Warn("the service answered 420 API limit exceeded: the token's request budget is used up; pausing every request",
			zap.Duration("pause", wait.Round(time.Millisecond)), zap.Duration("exhausted_for", now.Sub(since).Round(time.Millisecond)),
			zap.Duration("retry_budget", c.cfg.MaxElapsed),
			zap.String("next_step", "nothing is lost: the sync resumes when the budget comes back; past the retry budget the cycle fails and the next one resumes where it stopped (check the account's plan and usage)"))
	}
	return since
}

// quotaRefusal returns the error of a call that is not sent because the
// pause after the last 420 ends past the streak's retry budget; nil when
// the call may go (the pause is over, and the request finds out whether
// the token's budget is back).
func (c *Client) quotaRefusal(cl *call) error {
	now := c.now()
	c.quota.mu.Lock()
	defer c.quota.mu.Unlock()
	q := &c.quota
	if q.since.IsZero() || q.last == nil || !now.Before(q.until) || q.until.Sub(q.since) <= c.cfg.MaxElapsed {
		return nil
	}
	ae := *q.last
	ae.Method, ae.Endpoint = cl.method, cl.u.EscapedPath()
	return fmt.Errorf("not sent: the token's API budget has been used up (HTTP 420) for %s, and the pause until the next try (%s) passes the %s retry budget: %w",
		now.Sub(q.since).Round(time.Millisecond), q.until.Sub(now).Round(time.Millisecond), c.cfg.MaxElapsed, &ae)
}

// limitWait adjusts the wait before retrying a call that started at start
// and failed with ae (nil when not an API error): after a 420, the long
// wait, paused for every request, and the retry budget counted from the
// streak's first 420 when that was earlier.
func (c *Client) limitWait(ae *APIError, wait time.Duration, start time.Time) (time.Duration, time.Time) {
	if ae == nil || ae.Status != StatusAPILimitExceeded {
		return wait, start
	}
	wait = c.quotaWait(wait)
	if since := c.exhausted(ae, wait); since.Before(start) {
		return wait, since
	}
	return wait, start
}

// retryLevel is the level of the log line of a retry after ae: finding the
// service's rate is routine (see adapt.go), so a 429 is logged at debug,
// and fleetsync_api_rate_limited_total counts it.
func retryLevel(ae *APIError) zapcore.Level {
	if ae != nil && ae.Status == http.StatusTooManyRequests {
		return zapcore.DebugLevel
	}
	return zapcore.WarnLevel
}
