package fleetsim

import (
	"fmt"
	"strings"
	"time"
)

// TokenKind is the scope of an API token.
type TokenKind int

// The token kinds the service knows.
const (
	// TokenOrdinary is an ordinary API token: it cannot read organization
	// objects (403) but reads their devices and dashboards.
	TokenOrdinary TokenKind = iota
	// TokenOrganization is an organization-scoped token.
	TokenOrganization
	// TokenAccount is an account-scoped token.
	TokenAccount
)

// String names the kind as the control interface spells it.
func (k TokenKind) String() string {
	switch k {
	case TokenOrganization:
		return "organization"
	case TokenAccount:
		return "account"
	default:
		return "ordinary"
	}
}

// ParseTokenKind reads a kind spelled "ordinary", "organization" ("org") or
// "account".
func ParseTokenKind(s string) (TokenKind, error) {
	switch strings.ToLower(s) {
	case "", "ordinary":
		return TokenOrdinary, nil
	case "organization", "org":
		return TokenOrganization, nil
	case "account":
		return TokenAccount, nil
	}
	return 0, fmt.Errorf("token kind %q: want ordinary, organization or account", s)
}

type token struct {
	kind    TokenKind
	expires time.Time
}

// AddToken accepts token as a token of the given kind for ttl from now
// (ttl <= 0 means the configured TokenTTL). Adding an existing token renews it.
func (s *Sim) AddToken(tok string, kind TokenKind, ttl time.Duration) {
	if ttl <= 0 {
		ttl = s.tokenTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[tok] = &token{kind: kind, expires: s.now().Add(ttl)}
}

// ExpireTokens makes every current token expired; tokens added later are
// valid again.
func (s *Sim) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, t := range s.tokens {
		t.expires = now
	}
}

// ExpireToken makes one token expired, leaving the others valid: a
// rotation where the new token is mounted before the old one expires, as
// Kubernetes rotates projected tokens.
func (s *Sim) ExpireToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tokens[tok]; ok {
		t.expires = s.now()
	}
}

// authenticate returns the kind of a valid token.
func (s *Sim) authenticate(tok string) (TokenKind, bool) {
	if tok == "" {
		return 0, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tokens[tok]
	if !ok || !s.now().Before(t.expires) {
		return 0, false
	}
	return t.kind, true
}
