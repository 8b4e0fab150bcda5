package fleetsim

import (
	"time"
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
	// RateLimit is the per-token request limit and budget (see
	// SetRateLimit); the zero value is off.
	RateLimit RateLimit
	// RejectPageSizeAbove, when positive, answers a Platform API list
	// request whose page_size is above it with 400 (code 400001 naming
	// page_size) instead of clamping it to 1000.
	RejectPageSizeAbove int
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
	// SeriesOrder chooses, for per-variable raw-series frames
	// (join_dataframes false), which points a frame cut by `limit` keeps
	// (SeriesOrder.Cut: newest, oldest, any, mixed) and the order its rows
	// are served in (SeriesOrder.Rows: newest first, oldest first,
	// shuffled), independently. Random choices follow Seed and the
	// request's variable, window (the points it covers) and limit. The
	// zero value, SeriesNewest, is the newest points, newest first;
	// joined frames always are.
	SeriesOrder SeriesOrder
	// ContextBytes, when positive, pads every generated point's context
	// with a string member "pad" to at least this many bytes of compact
	// JSON, the shape of a service whose points carry rich contexts (the
	// generated ones are at most ~32 bytes, {} for most points). The
	// context stays one valid JSON object; lat and lng are kept.
	ContextBytes int
	// ResultsFirst makes raw-series responses carry `results` before
	// `columns`. JSON members are unordered and the spec names both
	// without an order, so a client that decodes `results` by the
	// returned `columns` must hold them until the columns arrive.
	ResultsFirst bool
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
