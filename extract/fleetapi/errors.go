package fleetapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Error codes of the service's Errors table.
const (
	CodeValidation       = 400001
	CodeUnauthorized     = 401002
	CodeRetention        = 403003
	CodeNotFound         = 404001
	CodeMethodNotAllowed = 405001
)

// APIError is a non-2xx response of the service. It is filled from any of the
// four documented body shapes ({code,message}, {detail},
// {code,message,detail}, {description,status,message}) and from an empty or
// non-JSON body; the HTTP status is always authoritative, as the service's
// documentation says to branch on it rather than on the body shape.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the service's numeric code (400001, 401002, ...); 0 when the
	// body carried none.
	Code int
	// Message is the body's message. In the {description,status,message}
	// shape it embeds an internal schema name and must not be parsed.
	Message string
	// Detail is the body's detail: a string, a []any or a map[string]any, or
	// nil.
	Detail any
	// Description is the HTTP reason repeated by the Data API's schema
	// validation shape; empty otherwise.
	Description string
	// Endpoint is the request's URL path, without the query.
	Endpoint string
	// Method is the request's HTTP method.
	Method string

	// retryAt is the instant named by a Retry-After header; zero if none.
	retryAt time.Time
	// variable is 1 + the position, in the raw-series request's variables,
	// of the one variable the body names; 0 when it names none, several,
	// or the request was not a raw-series read.
	variable int
}

// Error renders the failure on one line: method, path, status, code, message
// and a short form of the detail.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Method)
	b.WriteByte(' ')
	b.WriteString(e.Endpoint)
	b.WriteString(": HTTP ")
	b.WriteString(strconv.Itoa(e.Status))
	if e.Code != 0 {
		b.WriteString(", code ")
		b.WriteString(strconv.Itoa(e.Code))
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(oneLine(e.Message, 300))
	} else if e.Description != "" {
		b.WriteString(": ")
		b.WriteString(oneLine(e.Description, 300))
	}
	if e.Detail != nil {
		b.WriteString(" (detail: ")
		b.WriteString(oneLine(renderDetail(e.Detail), 300))
		b.WriteByte(')')
	}
	if e.Message == "" && e.Description == "" && e.Detail == nil {
		b.WriteString(": ")
		if t := http.StatusText(e.Status); t != "" {
			b.WriteString(t)
		} else {
			b.WriteString("no body")
		}
	}
	return b.String()
}

// RetryAt is the earliest instant the service asked the client to retry at
// through Retry-After, or the zero time if it did not say.
func (e *APIError) RetryAt() time.Time { return e.retryAt }

func renderDetail(d any) string {
	if s, ok := d.(string); ok {
		return s
	}
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Sprint(d)
	}
	return string(b)
}

// oneLine collapses whitespace runs (newlines included) to single spaces and
// cuts s to at most max bytes on a rune boundary.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// RetentionError is a read rejected because its range reaches further back
// than the account's retention window (403, code 403003; or, with
// format=csv, a 403 with an empty body). The service rejects such a range in
// full, so the caller must move its retention floor forward and ask again.
type RetentionError struct {
	// API is the service's response.
	API *APIError
}

// Error describes the rejection.
func (e *RetentionError) Error() string {
	return "range reaches past the retention window: " + e.API.Error()
}

// Unwrap gives the APIError, so that errors.As finds it too.
func (e *RetentionError) Unwrap() error { return e.API }

// VariableScoped is false: the retention window is the account's, and the
// range is rejected whichever variables are asked for.
func (e *RetentionError) VariableScoped() bool { return false }

// TransportError is a failure below HTTP semantics: the connection could not
// be made or was reset, the request timed out, or the body was cut
// mid-stream. It is always retryable.
type TransportError struct {
	// Method and Endpoint (the URL path, no query) name the request.
	Method   string
	Endpoint string
	// Timeout says the per-request timeout expired.
	Timeout bool
	// Cut says the response body ended or failed before it was complete.
	Cut bool
	// Err is the underlying error.
	Err error
}

// Error names the request and the failure.
func (e *TransportError) Error() string {
	what := "transport"
	switch {
	case e.Timeout:
		what = "timeout"
	case e.Cut:
		what = "body cut"
	}
	return fmt.Sprintf("%s %s: %s: %v", e.Method, e.Endpoint, what, e.Err)
}

// Unwrap gives the underlying error.
func (e *TransportError) Unwrap() error { return e.Err }

// VariableIndex is always -1: a failed transport concerns the whole request,
// even when the body was cut inside one variable's frame (the DecodeError
// it wraps then names that frame, which errors.As must not reach first).
func (e *TransportError) VariableIndex() int { return -1 }

// DecodeError is a response body the client cannot read as the service's
// documentation describes it: bad syntax, an unexpected shape, a frame that
// does not belong to the requested variable, or a timestamp outside the
// requested range (a seconds-precision timestamp is one). It is permanent,
// except that a client-side DecodeError caused by a body cut short is reported
// as a TransportError instead.
type DecodeError struct {
	// VariableID names the variable whose frame was being read, if any.
	VariableID string
	// Frame and Row locate the failure (-1 when not inside one).
	Frame, Row int
	// Offset is the byte offset in the body.
	Offset int64
	// Msg says what was wrong.
	Msg string
	// Err is an underlying error (a read error, io.ErrUnexpectedEOF, a sink
	// error is never wrapped here).
	Err error

	// tied says the failure is about what frame Frame holds (so about the
	// variable VariableID), not about the response as a whole.
	tied bool
}

// VariableIndex is the position in the raw-series request's VariableIDs of
// the variable whose frame the decoder refused (a value or timestamp it
// cannot read, a malformed context, a timestamp outside the range), or -1
// when the failure concerns the whole response: its envelope, its frame or
// column count, a body that ended early.
func (e *DecodeError) VariableIndex() int {
	if e.tied && e.Frame >= 0 {
		return e.Frame
	}
	return -1
}

// Error locates and describes the failure.
func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("decode")
	if e.VariableID != "" {
		b.WriteString(" variable ")
		b.WriteString(e.VariableID)
	}
	if e.Frame >= 0 {
		fmt.Fprintf(&b, " frame %d", e.Frame)
	}
	if e.Row >= 0 {
		fmt.Fprintf(&b, " row %d", e.Row)
	}
	fmt.Fprintf(&b, " at byte %d: %s", e.Offset, e.Msg)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap gives the underlying error.
func (e *DecodeError) Unwrap() error { return e.Err }

// ErrStatisticNotImplemented is returned by Statistic when the service
// answers 200 with an empty object, its way of saying that the function is
// not one it implements.
var ErrStatisticNotImplemented = errors.New("statistic function not implemented by the service (200 with {})")

// Retryable tells whether err is worth retrying: 5xx, 429, 420 and 408
// responses, timeouts, connection failures, bodies cut mid-stream and list
// walks abandoned because the list kept changing are; other 4xx, decode
// errors, cancelled contexts and everything else are not.
func Retryable(err error) bool {
	var te *TransportError
	if errors.As(err, &te) {
		return te.Retryable()
	}
	var lc *ListChangedError
	if errors.As(err, &lc) {
		return true
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return retryableStatus(ae.Status)
	}
	return false
}

// StatusAPILimitExceeded is the non-standard HTTP 420 ("API limit
// exceeded", Twitter's old "enhance your calm") with which the hosted
// service behind the spec answers some requests over its rate limit, as it
// answers others with 429.
const StatusAPILimitExceeded = 420

func retryableStatus(status int) bool {
	return status >= 500 || rateLimited(status) || status == http.StatusRequestTimeout
}

// rateLimited tells whether status is one of the rate-limit answers (429 and
// 420), which the service gives without acting on the request.
func rateLimited(status int) bool {
	return status == http.StatusTooManyRequests || status == StatusAPILimitExceeded
}

// VariableScoped reports a permanent rejection that one of the request's
// variables may have caused: a 4xx other than those that concern the token,
// the account or the service as a whole, which are 401 (credentials), 402
// (payment required), 407 (proxy credentials), 408 (timeout), 420 and 429
// (rate limits) and the 403 with code 403003 (retention window). 5xx and
// every other status are not scoped.
func (e *APIError) VariableScoped() bool {
	if e.Status < 400 || e.Status > 499 {
		return false
	}
	switch e.Status {
	case http.StatusUnauthorized, http.StatusPaymentRequired, http.StatusProxyAuthRequired,
		http.StatusRequestTimeout, http.StatusTooManyRequests, StatusAPILimitExceeded:
		return false
	case http.StatusForbidden:
		return e.Code != CodeRetention
	}
	return true
}

// VariableIndex is, for a raw-series rejection that VariableScoped reports
// and whose body (message, detail or any other string or key in it) names
// exactly one of the requested variable ids, that variable's position in the
// request's VariableIDs; -1 otherwise.
func (e *APIError) VariableIndex() int {
	if e.variable <= 0 || !e.VariableScoped() {
		return -1
	}
	return e.variable - 1
}

// ListChangedError is a list walk abandoned because pages kept vanishing
// under it: a page after the first answered 404 ("Invalid page.") because
// the list shrank while it was paged, and restarting the walk from its first
// page did not help within the allowed restarts. The parent object exists
// (its first page answered), so this is neither a NotFound nor permanent: a
// later walk may succeed.
type ListChangedError struct {
	// List is the list's URL path, without the query.
	List string
	// Restarts is how many times the walk started over.
	Restarts int
	// Last is the 404 that ended the walk.
	Last *APIError
}

// Error names the list and the last failure.
func (e *ListChangedError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("list %s kept shrinking while it was paged: gave up after %d restarts from page 1", e.List, e.Restarts)
	}
	return fmt.Sprintf("list %s kept shrinking while it was paged: a page past the first was gone again after %d restarts from page 1 (last: HTTP %d %s)",
		e.List, e.Restarts, e.Last.Status, oneLine(renderDetailOrMessage(e.Last), 100))
}

// Retryable is true: a later walk, when the list has settled, may succeed.
func (e *ListChangedError) Retryable() bool { return true }

func renderDetailOrMessage(e *APIError) string {
	switch {
	case e.Detail != nil:
		return renderDetail(e.Detail)
	case e.Message != "":
		return e.Message
	}
	return http.StatusText(e.Status)
}

// IsRetention tells whether err is a range rejected for reaching past the
// retention window; errors.As with *RetentionError gives the details.
func IsRetention(err error) bool {
	var re *RetentionError
	return errors.As(err, &re)
}

// IsUnauthorized tells whether err is a 401: the token is wrong or expired
// and re-reading it did not help.
func IsUnauthorized(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusUnauthorized
}

// IsNotFound tells whether err is a 404 (an unknown object or label, or a
// page past the end).
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}
