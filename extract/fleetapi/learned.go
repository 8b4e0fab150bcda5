package fleetapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// LearnedRate is what a Client learned of the service's request limit for
// its token (see adapt.go). A program that runs often, like a sync every
// few minutes, keeps it between runs and seeds the next run's Client with
// it (SeedRate), which then starts where the last one ended instead of
// learning the limit again from 429s.
type LearnedRate struct {
	// PerSecond is the rate to start from, in requests per second; 0
	// means unlimited (a cautious start went past every plausible limit
	// without a 429).
	PerSecond float64
	// Limited tells that 429s taught PerSecond: a Client seeded with it
	// holds it, then probes upward slowly. Otherwise PerSecond is how far
	// a cautious start got without a 429, and the seeded Client goes on
	// growing from there.
	Limited bool
	// Limit is the service's limit as last estimated from 429s; 0 when
	// none was yet.
	Limit float64
	// At is when a 429 last set the rate; zero when none did.
	At time.Time
}

// String describes r for an operator.
func (r LearnedRate) String() string {
	switch {
	case r.Limited && r.Limit > 0:
		return fmt.Sprintf("%.2f requests/s (limit estimated at %.2f/s)", r.PerSecond, r.Limit)
	case r.Limited:
		return fmt.Sprintf("%.2f requests/s (no estimate of the limit yet)", r.PerSecond)
	case r.PerSecond > 0:
		return fmt.Sprintf("%.2f requests/s without a 429 yet (still growing)", r.PerSecond)
	default:
		return "unlimited (no 429 yet)"
	}
}

// LearnedRate returns what the Client has learned of the service's request
// limit, to seed a later Client with.
func (c *Client) LearnedRate() LearnedRate { return c.lim.Learned() }

// SeedRate makes the Client start from what an earlier Client learned
// (LearnedRate) instead of starting cautiously. Call it before the first
// request.
func (c *Client) SeedRate(r LearnedRate) { c.lim.Seed(r) }

// RateKey names the limit the Client is subject to, for keeping its
// LearnedRate: the base URL's host and path, and a fingerprint of the
// token (the service limits per token). The fingerprint is a truncated
// SHA-256: it tells tokens apart and cannot be turned back into one.
func (c *Client) RateKey() (string, error) {
	tok, err := c.tokens.Token()
	if err != nil {
		return "", fmt.Errorf("rate key: %w", err)
	}
	where := c.base.Host + c.base.Path
	sum := sha256.Sum256([]byte("fleetsync rate key\x00" + where + "\x00" + tok))
	return where + "#" + hex.EncodeToString(sum[:8]), nil
}
