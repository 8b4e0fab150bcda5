package metadata

import (
	"errors"

	"github.com/fleetsync/fleetsync/pipeline"
)

// PermissionError is implemented by the source's error for a valid token
// that may not read a resource (HTTP 403 without a retention code). Only
// the refresh asks it: an ordinary token may not list the organizations,
// which leaves their table empty rather than failing the cycle. The
// engine's classifications are pipeline's (pipeline/errors.go).
type PermissionError interface {
	error
	PermissionDenied() bool
}

// IsPermissionDenied reports whether err says the token may not read the
// resource (as opposed to a range past retention, also a 403).
func IsPermissionDenied(err error) bool {
	var p PermissionError
	return errors.As(err, &p) && p.PermissionDenied() && !pipeline.IsRetention(err)
}
