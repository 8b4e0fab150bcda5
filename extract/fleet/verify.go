package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline/verify"
)

var _ verify.Source = (*Source)(nil)

// Aggregate runs the aggregation POST for ids, asking for the joined frame:
// there each aggregate's column names its variable, whereas the spec does
// not say in which order per-variable results come.
func (s *Source) Aggregate(ctx context.Context, ids []string, fn string, start, end int64) ([]verify.Value, error) {
	vals, err := s.c.Aggregate(ctx, fleetapi.AggregationRequest{VariableIDs: ids, Aggregation: fn, Joined: true, Start: start, End: end})
	if err != nil {
		if unreadable(err) {
			return nil, fmt.Errorf("%w: %w", verify.ErrUnreadable, err)
		}
		return nil, err
	}
	out := make([]verify.Value, len(vals))
	for i, v := range vals {
		out[i] = verify.Value{VariableID: v.VariableID, Value: v.Value, HasValue: v.HasValue}
	}
	return out, nil
}

// Statistic reads one variable's statistic fn over [start, end].
func (s *Source) Statistic(ctx context.Context, variableID, fn string, start, end int64) (float64, bool, error) {
	return s.c.Statistic(ctx, variableID, fn, start, end)
}

// unreadable tells a response the client could not read (or the endpoint
// refused for this input) from failures that reading singly would meet
// too: the token, retention, the network, a cancelled context.
func unreadable(err error) bool {
	var de *fleetapi.DecodeError
	if errors.As(err, &de) {
		return true
	}
	var ae *fleetapi.APIError
	if errors.As(err, &ae) {
		// 404: a variable of the batch is gone; read singly, the error
		// then names it.
		return ae.Status == http.StatusBadRequest || ae.Status == http.StatusNotFound
	}
	return false
}
