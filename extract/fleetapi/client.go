package fleetapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Defaults of Config. DefaultBackoffInitial and DefaultBackoffMax (growth
// ×1.5, jitter ±50%, backoff/v4's own) are the client's fallback when it is
// used on its own; fleetsync hands in its policy from its retry table
// (pipeline/retries.go, APIRetry), whose row has the same numbers.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxElapsed     = 2 * time.Minute
	DefaultPageSize       = 100
	DefaultBackoffInitial = 250 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
)

// HostedRate is the request rate per token the hosted service documents,
// about 4 per second: where a cautious start begins (Config.StartRate).
const HostedRate = 4.0

const (
	platformPrefix = "/api/v2.0"
	dataPrefix     = "/api/v1.6"
	// maxErrorBody bounds the bytes read from a non-2xx body.
	maxErrorBody = 64 << 10
	// maxDrain bounds the bytes read past a handled body so that the
	// connection can be reused.
	maxDrain = 256 << 10
	// headerToken is the only place a token is ever sent.
	headerToken = "X-Auth-Token"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the service's root; the API paths /api/v2.0 and /api/v1.6
	// hang below it. Required.
	BaseURL string
	// Tokens gives the API token. Required.
	Tokens TokenSource
	// Timeout bounds, per request, the wait for the response headers and
	// each wait for more body bytes (time spent by the caller's callbacks
	// between reads does not count). Default 30s.
	Timeout time.Duration
	// RequestsPerSecond caps the request rate over all calls of the Client;
	// 0 means unlimited.
	RequestsPerSecond float64
	// StartRate is the request rate a Client starts at, growing while the
	// service admits it, until it learns the service's limit from 429s
	// (see adapt.go); SeedRate replaces it with what an earlier Client
	// learned. 0 starts unlimited (below RequestsPerSecond). HostedRate is
	// what the hosted service documents per token.
	StartRate float64
	// MaxElapsed is the retry budget of one call: retries stop once it would
	// be exceeded (a Retry-After reaching past it ends the call at once).
	// Default 2m.
	MaxElapsed time.Duration
	// BackoffInitial and BackoffMax shape the exponential backoff between
	// retries. Defaults 250ms and 30s.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// Backoff, when set, starts the wait sequence of one call instead of
	// the exponential backoff BackoffInitial and BackoffMax describe: a
	// program with one retry policy for all its loops hands it in here, as
	// fleetsync does from pipeline.APIRetry (with BackoffInitial and
	// BackoffMax from the same policy, since BackoffMax also bounds the wait
	// after a 420). MaxElapsed, Retry-After and the context still bound the
	// waits it gives.
	Backoff func() backoff.BackOff
	// UserAgent is sent on every request; default "fleetsync/<module
	// version>".
	UserAgent string
	// PageSize is the page_size of list requests. Default 100.
	PageSize int
	// HTTPClient is used instead of the Client's own (one keep-alive
	// transport). Its redirect policy is replaced so that a redirect to
	// another host never carries the token.
	HTTPClient *http.Client
	// TLS (nil: the system's CAs) and Proxy (nil: ProxyFromEnvironment)
	// configure the Client's own transport; unused with HTTPClient.
	TLS   *tls.Config
	Proxy func(*http.Request) (*url.URL, error)
}

// Client reads the Fleet Telemetry Service. It is safe for concurrent use.
type Client struct {
	cfg    Config
	base   *url.URL
	tokens TokenSource
	hc     *http.Client
	log    *zap.Logger
	m      *metrics
	lim    *limiter
	quota  quotaState
	// pageSize is the page_size of lists: cfg.PageSize, or 50 once the
	// service rejected it (see pagesize.go).
	pageSize atomic.Int64
	ua       string
	now      func() time.Time
	// orgsDenied is the organization list's refusal to the current token.
	orgsDenied deniedList
}

// New checks cfg, fills its defaults and builds a Client. logger may be nil
// (no logging); reg may be nil (metrics are kept but not registered).
func New(cfg Config, logger *zap.Logger, reg prometheus.Registerer) (*Client, error) {
	var problems []error
	base, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	switch {
	case cfg.BaseURL == "":
		problems = append(problems, errors.New("base URL is empty"))
	case err != nil:
		problems = append(problems, fmt.Errorf("base URL: %w", err))
	case base.Scheme != "http" && base.Scheme != "https" || base.Host == "":
		problems = append(problems, fmt.Errorf("base URL %q must be an absolute http or https URL", cfg.BaseURL))
	case base.User != nil:
		problems = append(problems, errors.New("base URL must not carry credentials"))
	case base.RawQuery != "" || base.Fragment != "":
		problems = append(problems, errors.New("base URL must not have a query or a fragment"))
	}
	if cfg.Tokens == nil {
		problems = append(problems, errors.New("no token source"))
	}
	if cfg.Timeout < 0 || cfg.MaxElapsed < 0 || cfg.RequestsPerSecond < 0 || cfg.StartRate < 0 || cfg.PageSize < 0 {
		problems = append(problems, errors.New("timeout, max elapsed, requests per second, start rate and page size must not be negative"))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("fleetapi config: %w", errors.Join(problems...))
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxElapsed == 0 {
		cfg.MaxElapsed = DefaultMaxElapsed
	}
	if cfg.BackoffInitial <= 0 {
		cfg.BackoffInitial = DefaultBackoffInitial
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "fleetsync/" + moduleVersion()
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("fleetapi metrics: %w", err)
	}
	c := &Client{
		cfg:    cfg,
		base:   base,
		tokens: cfg.Tokens,
		log:    logger.With(zap.String("component", "fleetapi")),
		m:      m,
		lim:    newLimiter(cfg.RequestsPerSecond, cfg.StartRate, time.Now, m.rate),
		ua:     cfg.UserAgent,
		now:    time.Now,
	}
	var hc http.Client
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 64
		tr.MaxIdleConnsPerHost = 32
		tr.IdleConnTimeout = 90 * time.Second
		tr.ResponseHeaderTimeout = cfg.Timeout
		tr.TLSClientConfig = cfg.TLS
		if cfg.Proxy != nil {
			tr.Proxy = cfg.Proxy
		}
		hc.Transport = tr
	}
	hc.CheckRedirect = c.checkRedirect
	c.hc = &hc
	c.pageSize.Store(int64(cfg.PageSize))
	return c, nil
}

// moduleVersion is the main module's version as built, "dev" when unknown.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return strings.TrimPrefix(bi.Main.Version, "v")
	}
	return "dev"
}

// RefreshToken re-reads the token now when the token source can (a
// TokenFile); the sync calls it before each cycle.
func (c *Client) RefreshToken() error {
	if r, ok := c.tokens.(interface{ Refresh() error }); ok {
		return r.Refresh()
	}
	return nil
}

// call is one logical request, retried as a whole.
type call struct {
	method   string
	endpoint string // bounded metric label
	u        *url.URL
	body     []byte // JSON body of a POST, resent on each attempt
	accept   string
	// handle reads a 2xx body. Errors the body reader produced come back as
	// *TransportError; anything else it returns is permanent, except a
	// DecodeError caused by a truncated body.
	handle func(resp *http.Response, body io.Reader) error
	// delivered reports whether handle has passed data on; a failure after
	// that is returned to the caller instead of retried.
	delivered func() bool
	// csv marks a values CSV request, whose retention 403 has an empty body.
	csv bool
	// unsafe marks a request that is not idempotent (a create, an assign):
	// it is retried only after a 429, a 420 or a 401, which the service
	// answers without acting.
	unsafe bool
	// variables are the variable ids of a raw-series request, in request
	// order: a scoped rejection whose body names one of them reports it
	// through APIError.VariableIndex.
	variables []string
}

// errRequestTimeout is the cancellation cause of a request whose timeout
// expired.
var errRequestTimeout = errors.New("request timeout")

// do runs cl with retries: exponential backoff bounded by MaxElapsed and
// ctx, Retry-After honoured, one immediate retry with a re-read token after a
// 401.
func (c *Client) do(ctx context.Context, cl *call) error {
	bo := c.newBackOff()
	start := c.now()
	unauthorized := false
	for attempt := 1; ; attempt++ {
		if err := c.quotaRefusal(cl); err != nil {
			return err
		}
		err := c.attempt(ctx, cl)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			if errors.Is(err, ctx.Err()) {
				return err
			}
			return fmt.Errorf("%s %s: %w", cl.method, cl.u.EscapedPath(), ctx.Err())
		}
		if cl.delivered != nil && cl.delivered() {
			return err
		}
		if IsUnauthorized(err) {
			if unauthorized {
				return err
			}
			unauthorized = true
			c.tokens.Invalidate()
			c.m.retries.WithLabelValues(cl.endpoint).Inc()
			c.log.Info("token rejected; re-reading it and retrying once",
				zap.String("method", cl.method), zap.String("path", cl.u.EscapedPath()))
			continue
		}
		unauthorized = false
		if !Retryable(err) {
			return err
		}
		if cl.unsafe {
			var ae *APIError
			if !errors.As(err, &ae) || !rateLimited(ae.Status) {
				return err
			}
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop {
			return fmt.Errorf("giving up after %d attempts in %s: %w", attempt, c.now().Sub(start).Round(time.Millisecond), err)
		}
		var ae *APIError
		if errors.As(err, &ae) && !ae.retryAt.IsZero() {
			if d := ae.retryAt.Sub(c.now()); d > wait {
				wait = d
			}
		}
		wait, budgetFrom := c.limitWait(ae, wait, start)
		if c.now().Add(wait).Sub(budgetFrom) > c.cfg.MaxElapsed {
			return fmt.Errorf("giving up after %d attempts: the next try (in %s) would pass the %s retry budget: %w",
				attempt, wait.Round(time.Millisecond), c.cfg.MaxElapsed, err)
		}
		if dl, ok := ctx.Deadline(); ok && c.now().Add(wait).After(dl) {
			return fmt.Errorf("giving up after %d attempts: the next try (in %s) would pass the context's deadline: %w",
				attempt, wait.Round(time.Millisecond), err)
		}
		c.m.retries.WithLabelValues(cl.endpoint).Inc()
		c.log.Log(retryLevel(ae), "request failed; retrying",
			zap.String("method", cl.method), zap.String("path", cl.u.EscapedPath()),
			zap.Int("attempt", attempt), zap.Duration("wait", wait), zap.Error(err))
		if serr := sleepUntil(ctx, c.now().Add(wait), c.now); serr != nil {
			return fmt.Errorf("%s %s: waiting to retry: %w (last failure: %v)", cl.method, cl.u.EscapedPath(), serr, err)
		}
	}
}

// newBackOff starts the waits of one call: the program's policy when it
// handed one in, else the fallback of BackoffInitial and BackoffMax with
// backoff/v4's growth (×1.5) and jitter (±50%).
func (c *Client) newBackOff() backoff.BackOff {
	if c.cfg.Backoff != nil {
		return c.cfg.Backoff()
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = c.cfg.BackoffInitial
	bo.MaxInterval = c.cfg.BackoffMax
	bo.MaxElapsedTime = c.cfg.MaxElapsed
	bo.Reset()
	return bo
}

// attempt sends cl once.
func (c *Client) attempt(ctx context.Context, cl *call) (err error) {
	if err := c.lim.Wait(ctx); err != nil {
		return fmt.Errorf("%s %s: waiting for the rate limit: %w", cl.method, cl.u.EscapedPath(), err)
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(actx, cl.method, cl.u.String(), body)
	if err != nil {
		return fmt.Errorf("%s %s: build request: %w", cl.method, cl.u.EscapedPath(), stripURL(err))
	}
	req.Header.Set("User-Agent", c.ua)
	if cl.accept != "" {
		req.Header.Set("Accept", cl.accept)
	}
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.sameOrigin(cl.u) {
		tok, err := c.tokens.Token()
		if err != nil {
			return fmt.Errorf("%s %s: %w", cl.method, cl.u.EscapedPath(), err)
		}
		req.Header.Set(headerToken, tok)
	}
	timer := time.AfterFunc(c.cfg.Timeout, func() { cancel(errRequestTimeout) })
	defer timer.Stop()
	began := time.Now()
	resp, err := c.hc.Do(req)
	timer.Stop()
	if err != nil {
		c.observe(cl.endpoint, "error", began)
		return c.transportError(ctx, actx, cl, err, false)
	}
	defer resp.Body.Close()
	class := fmt.Sprintf("%dxx", resp.StatusCode/100)
	defer c.observe(cl.endpoint, class, began)
	retryAt := c.observeLimit(resp)
	rb := &responseBody{rc: resp.Body, timer: timer, timeout: c.cfg.Timeout, parent: ctx, actx: actx, c: c, cl: cl}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		herr := cl.handle(resp, rb)
		if herr == nil {
			_, _ = io.CopyN(io.Discard, rb, maxDrain)
			return nil
		}
		return c.bodyError(ctx, cl, herr)
	}
	data, _ := io.ReadAll(io.LimitReader(rb, maxErrorBody))
	ae := ParseError(resp.StatusCode, data)
	ae.Method, ae.Endpoint = cl.method, cl.u.EscapedPath()
	ae.retryAt = retryAt
	if resp.StatusCode == http.StatusForbidden &&
		(ae.Code == CodeRetention || cl.csv && len(bytes.TrimSpace(data)) == 0) {
		return &RetentionError{API: ae}
	}
	if len(cl.variables) > 0 && ae.VariableScoped() {
		if i := namedVariable(data, cl.variables); i >= 0 {
			ae.variable = i + 1
		}
	}
	return ae
}

func (c *Client) observe(endpoint, class string, began time.Time) {
	c.m.requests.WithLabelValues(endpoint, class).Inc()
	c.m.duration.WithLabelValues(endpoint).Observe(time.Since(began).Seconds())
}

// stripURL removes the *url.Error layer, whose text repeats the whole URL
// with its query.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// transportError classifies a failure to get or read a response.
func (c *Client) transportError(parent, actx context.Context, cl *call, err error, cut bool) error {
	if parent.Err() != nil {
		return fmt.Errorf("%s %s: %w", cl.method, cl.u.EscapedPath(), parent.Err())
	}
	timeout := errors.Is(context.Cause(actx), errRequestTimeout)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		timeout = true
	}
	return &TransportError{Method: cl.method, Endpoint: cl.u.EscapedPath(), Timeout: timeout, Cut: cut && !timeout, Err: stripURL(err)}
}

// bodyError classifies an error of a 2xx body's handler.
func (c *Client) bodyError(parent context.Context, cl *call, err error) error {
	if parent.Err() != nil && !errors.Is(err, parent.Err()) {
		return fmt.Errorf("%s %s: %w (%v)", cl.method, cl.u.EscapedPath(), parent.Err(), err)
	}
	var te *TransportError
	if errors.As(err, &te) {
		return err
	}
	var de *DecodeError
	if errors.As(err, &de) && errors.Is(de.Err, io.ErrUnexpectedEOF) {
		return &TransportError{Method: cl.method, Endpoint: cl.u.EscapedPath(), Cut: true, Err: err}
	}
	return err
}

// responseBody applies the per-read timeout to a body and reports its read
// failures as *TransportError.
type responseBody struct {
	rc      io.ReadCloser
	timer   *time.Timer
	timeout time.Duration
	parent  context.Context
	actx    context.Context
	c       *Client
	cl      *call
}

func (b *responseBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF {
		if b.parent.Err() != nil {
			return n, err
		}
		return n, b.c.transportError(b.parent, b.actx, b.cl, err, true)
	}
	return n, err
}

// decodeJSON reads one JSON document of a 2xx body into v.
func decodeJSON(body io.Reader, v any) error {
	err := json.NewDecoder(body).Decode(v)
	if err == nil {
		return nil
	}
	var te *TransportError
	if errors.As(err, &te) {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &DecodeError{Frame: -1, Row: -1, Msg: "the body ended before the JSON document did", Err: io.ErrUnexpectedEOF}
	}
	return &DecodeError{Frame: -1, Row: -1, Msg: "unexpected JSON", Err: err}
}

// getJSON GETs u and decodes the body into v.
func (c *Client) getJSON(ctx context.Context, endpoint string, u *url.URL, v any) error {
	return c.do(ctx, &call{method: http.MethodGet, endpoint: endpoint, u: u, accept: "application/json",
		handle: func(_ *http.Response, body io.Reader) error { return decodeJSON(body, v) }})
}

// postJSON POSTs in as JSON to u and decodes the body into out.
func (c *Client) postJSON(ctx context.Context, endpoint string, u *url.URL, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode the request body: %w", err)
	}
	return c.do(ctx, &call{method: http.MethodPost, endpoint: endpoint, u: u, body: b, accept: "application/json",
		handle: func(_ *http.Response, body io.Reader) error { return decodeJSON(body, out) }})
}
