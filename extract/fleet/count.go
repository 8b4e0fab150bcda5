package fleet

import (
	"context"
	"math"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline"
)

var _ pipeline.CountSource = (*Source)(nil)

// Count returns the points of each variable in [start, end] with one
// aggregation POST (count, one result per variable), for the engine's proof
// that a frame of `limit` rows was whole. A result that is not a whole
// number is no count (-1): a proof never rests on a guess.
func (s *Source) Count(ctx context.Context, ids []string, start, end int64) ([]int64, error) {
	vals, err := s.c.Aggregate(ctx, fleetapi.AggregationRequest{VariableIDs: ids, Aggregation: "count", Start: start, End: end})
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(ids))
	for i, v := range vals {
		out[i] = -1
		if v.HasValue && v.Value >= 0 && v.Value == math.Trunc(v.Value) && v.Value < 1<<53 {
			out[i] = int64(v.Value)
		}
	}
	return out, nil
}
