package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	chload "github.com/fleetsync/fleetsync/load/clickhouse"
)

// Rate is the request rate learned from the service's 429s for one API
// token of one source, kept so that the next run starts from it instead of
// learning it again (the API client's LearnedRate; the caller converts).
type Rate struct {
	// Key names the source and the token: the base URL's host and path and
	// a fingerprint of the token, never the token itself.
	Key string `json:"-"`
	// PerSecond is the rate to start from; 0 means unlimited.
	PerSecond float64 `json:"per_second"`
	// Limited tells that 429s taught PerSecond; otherwise it is how far a
	// cautious start got without one.
	Limited bool `json:"limited,omitempty"`
	// Limit is the service's limit as estimated from 429s; 0 when none was.
	Limit float64 `json:"limit,omitempty"`
	// LearnedAt is when a 429 last set the rate; zero when none did.
	LearnedAt time.Time `json:"learned_at,omitzero"`
	// SavedAt is when the run that learned it saved it.
	SavedAt time.Time `json:"saved_at"`
}

// Rates returns every kept rate, by key.
func (f *File) Rates(ctx context.Context) (map[string]Rate, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	doc, err := f.readDoc()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Rate, len(doc.Rates))
	for k, r := range doc.Rates {
		r.Key = k
		out[k] = r
	}
	return out, nil
}

// SaveRate keeps r under its key, replacing what was kept there.
func (f *File) SaveRate(ctx context.Context, r Rate) error {
	if r.Key == "" {
		return errors.New("save rate: empty key")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	unlock, err := lockFile(ctx, f.path+".lock")
	if err != nil {
		return fmt.Errorf("save rate to %s: %w", f.path, err)
	}
	defer unlock()
	doc, err := f.readDoc()
	if err != nil {
		return fmt.Errorf("save rate: %w", err)
	}
	if doc.Rates == nil {
		doc.Rates = map[string]Rate{}
	}
	doc.Rates[r.Key] = r
	if err := f.write(doc); err != nil {
		return fmt.Errorf("save rate to %s: %w", f.path, err)
	}
	return nil
}

// ratePrefix starts the names of the rows of sync_lease that keep rates.
// A rate row has no token, so it is never a live lease, and lease names
// ("sync", "sync/shard-N") never start so.
const ratePrefix = "rate/"

// Rates returns every kept rate, by key, from the rows of sync_lease named
// ratePrefix + key (their holder column holds the rate as JSON): a small
// key-value table that is already in every warehouse.
func (s *ClickHouse) Rates(ctx context.Context) (map[string]Rate, error) {
	table := s.c.Table(chload.TableSyncLease)
	rows, err := s.c.Conn().Query(ctx,
		"SELECT name, argMax(holder, version) FROM "+table+" WHERE startsWith(name, ?) GROUP BY name", ratePrefix)
	if err != nil {
		return nil, fmt.Errorf("read rates from %s (run `fleetsync migrate` if the table is missing): %w", table, err)
	}
	defer rows.Close()
	out := map[string]Rate{}
	for rows.Next() {
		var name, doc string
		if err := rows.Scan(&name, &doc); err != nil {
			return nil, fmt.Errorf("read rates from %s: %w", table, err)
		}
		var r Rate
		if err := json.Unmarshal([]byte(doc), &r); err != nil {
			// A row this version cannot read is skipped: the run learns
			// the rate again and overwrites it.
			continue
		}
		r.Key = strings.TrimPrefix(name, ratePrefix)
		out[r.Key] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rates from %s: %w", table, err)
	}
	return out, nil
}

// SaveRate keeps r under its key; the latest save wins.
func (s *ClickHouse) SaveRate(ctx context.Context, r Rate) error {
	if r.Key == "" {
		return errors.New("save rate: empty key")
	}
	doc, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("save rate: %w", err)
	}
	err = s.c.InsertRows(ctx, chload.TableSyncLease, "name, holder, token, expires_at_ms, version", 1, func(int) []any {
		return []any{ratePrefix + r.Key, string(doc), "", int64(0), s.c.NextVersion()}
	})
	if err != nil {
		return fmt.Errorf("save rate to %s: %w", s.c.Table(chload.TableSyncLease), err)
	}
	return nil
}
