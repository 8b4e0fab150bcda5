package fleetapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
)

// These methods classify the client's errors for any caller that decides by
// behaviour rather than by type (the sync's pipeline does, without
// importing this package): whether a retry may succeed, whether the object
// is gone, whether a range is past retention.

// NotFound reports a 404: the device or variable asked for does not exist
// (any more).
func (e *APIError) NotFound() bool { return e.Status == http.StatusNotFound }

// Retryable reports whether a later attempt may succeed (5xx, 408, and the
// rate limits 429 and 420).
func (e *APIError) Retryable() bool { return retryableStatus(e.Status) }

// Retryable is true for connection failures, timeouts and cut bodies,
// which are transient, and false for a service certificate that failed
// verification, which no retry cures.
func (e *TransportError) Retryable() bool { return !e.Untrusted() }

// Untrusted reports that the service's TLS certificate failed verification:
// signed by a CA not trusted, expired, or for another name.
func (e *TransportError) Untrusted() bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	return errors.As(e.Err, &verr) || errors.As(e.Err, &uerr) || errors.As(e.Err, &herr) || errors.As(e.Err, &cerr)
}

// RetentionExceeded marks the 403003 rejection for the pipeline, which moves
// its retention floor forward.
func (e *RetentionError) RetentionExceeded() bool { return true }
