package main

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/state"
)

// The request rate the API client learns from the service's 429s outlives
// the process: it is kept in the state store under the client's RateKey
// (the source and a fingerprint of the token, never the token) and the
// next run's client starts from it (see extract/fleetapi/adapt.go). A run
// with nothing kept starts at source.initial_requests_per_second.

// rateStore keeps learned rates by key; both state backends do.
type rateStore interface {
	Rates(ctx context.Context) (map[string]state.Rate, error)
	SaveRate(ctx context.Context, r state.Rate) error
}

// rateSaveTimeout bounds the save at the end of a process, whose own
// context may already be cancelled.
const rateSaveTimeout = 10 * time.Second

// restoreRate seeds the API client with the rate kept for its token, once
// per process (the daemon's client keeps what it learns from cycle to
// cycle). Call it after the schema is ensured. A failure to read only
// means starting cautiously; it is logged.
func (a *app) restoreRate(ctx context.Context) {
	if a.api == nil || a.rateRestored {
		return
	}
	a.rateRestored = true
	key, err := a.api.RateKey()
	if err != nil {
		a.log.Warn("cannot name the token's kept request rate; learning it afresh", zap.Error(err))
		return
	}
	a.rateKey = key
	rates, err := a.store.Rates(ctx)
	if err != nil {
		a.log.Warn("cannot read the kept request rate; learning it afresh", zap.Error(err))
		return
	}
	r, ok := rates[key]
	if !ok {
		a.log.Info("no request rate kept for this token yet: starting cautiously and learning it",
			zap.Float64("initial_requests_per_second", a.cfg.Source.InitialRequestsPerSecond), zap.String("rate_key", key))
		a.rateSaved = a.api.LearnedRate()
		return
	}
	learned := fleetapi.LearnedRate{PerSecond: r.PerSecond, Limited: r.Limited, Limit: r.Limit, At: r.LearnedAt}
	a.api.SeedRate(learned)
	a.rateSaved = learned
	fields := []zap.Field{zap.String("rate", learned.String()), zap.String("rate_key", key), zap.Time("saved_at", r.SavedAt)}
	if !r.LearnedAt.IsZero() {
		fields = append(fields, zap.Time("learned_at", r.LearnedAt))
	}
	a.log.Info("starting from the request rate kept by an earlier run", fields...)
}

// keepRate saves what the API client learned, when it changed since it was
// restored or last saved. A failure is logged: the next run learns again.
func (a *app) keepRate(ctx context.Context) {
	if a.api == nil || !a.rateRestored || a.rateKey == "" {
		return
	}
	learned := a.api.LearnedRate()
	if learned == a.rateSaved {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rateSaveTimeout)
	defer cancel()
	r := state.Rate{Key: a.rateKey, PerSecond: learned.PerSecond, Limited: learned.Limited, Limit: learned.Limit,
		LearnedAt: learned.At, SavedAt: time.Now().UTC()}
	if err := a.store.SaveRate(ctx, r); err != nil {
		a.log.Warn("cannot keep the learned request rate for the next run; it will learn it again", zap.Error(err))
		return
	}
	a.rateSaved = learned
	a.log.Debug("request rate kept for the next run", zap.String("rate", learned.String()), zap.String("rate_key", a.rateKey))
}
