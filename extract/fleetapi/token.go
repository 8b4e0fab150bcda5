package fleetapi

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// TokenSource gives the API token sent in the X-Auth-Token header.
// Implementations must be safe for concurrent use.
type TokenSource interface {
	// Token returns the current token.
	Token() (string, error)
	// Invalidate tells the source that the service rejected the token it
	// gave (401), so that the next Token call reads a fresh one if it can.
	Invalidate()
}

// StaticToken is a token source that always gives the same token; Invalidate
// does nothing, so a 401 with it is final after one retry.
func StaticToken(token string) TokenSource { return staticToken(token) }

type staticToken string

func (t staticToken) Token() (string, error) {
	if t == "" {
		return "", errors.New("token: the configured token is empty")
	}
	return string(t), nil
}

func (staticToken) Invalidate() {}

// TokenFile is a token source reading a file, as mounted from a Kubernetes
// secret (which rotates the file's content in place). The file is read on
// first use, by Refresh (the sync calls it before each cycle), and on the
// first Token call after Invalidate. Surrounding whitespace is ignored.
type TokenFile struct {
	path string

	mu    sync.Mutex
	token string
	stale bool
}

// FileToken makes a token source reading path.
func FileToken(path string) *TokenFile { return &TokenFile{path: path, stale: true} }

// Token returns the cached token, reading the file first if it was never read
// or was invalidated since.
func (f *TokenFile) Token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale || f.token == "" {
		if err := f.readLocked(); err != nil {
			return "", err
		}
	}
	return f.token, nil
}

// Invalidate makes the next Token call re-read the file.
func (f *TokenFile) Invalidate() {
	f.mu.Lock()
	f.stale = true
	f.mu.Unlock()
}

// Refresh re-reads the file now. On failure the previous token is kept
// stale, so that the next Token call tries the file again.
func (f *TokenFile) Refresh() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readLocked()
}

func (f *TokenFile) readLocked() error {
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.stale = true
		// The *PathError names the file and the reason, never its content.
		return fmt.Errorf("read token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		f.stale = true
		return fmt.Errorf("read token file %s: the file is empty", f.path)
	}
	if strings.ContainsAny(tok, "\r\n") {
		f.stale = true
		return fmt.Errorf("read token file %s: the token spans several lines", f.path)
	}
	f.token = tok
	f.stale = false
	return nil
}
