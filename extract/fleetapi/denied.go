package fleetapi

import (
	"crypto/sha256"
	"errors"
	"sync"
)

// deniedList remembers the token a list was refused to (403, permission
// denied) and the refusal, so that a later read of the list with the same
// token answers at once instead of asking again: a daemon's metadata
// refresh asks for the organizations once an hour, and an ordinary token
// is refused them every time (issue 37, "a 403 already seen for this
// token"). Only a hash of the token is kept, never the token.
type deniedList struct {
	mu    sync.Mutex
	token [sha256.Size]byte
	err   error
}

// tokenHash is the key of the token the client would send now; ok false
// when there is none to read (the request then fails on its own).
func (c *Client) tokenHash() (h [sha256.Size]byte, ok bool) {
	tok, err := c.tokens.Token()
	if err != nil || tok == "" {
		return h, false
	}
	return sha256.Sum256([]byte(tok)), true
}

// seen is the refusal kept for token h, nil when there is none.
func (d *deniedList) seen(h [sha256.Size]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil && d.token == h {
		return d.err
	}
	return nil
}

// note keeps err as the answer for token h when it is a permission
// refusal; any other outcome (a success, a failure that is not a refusal)
// forgets what was kept.
func (d *deniedList) note(h [sha256.Size]byte, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ae *APIError
	if errors.As(err, &ae) && ae.PermissionDenied() {
		d.token, d.err = h, err
		return
	}
	d.err = nil
}
