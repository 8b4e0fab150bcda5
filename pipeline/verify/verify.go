// Package verify reconciles the warehouse with the source: for each
// variable it compares the count and sum of the points over a range, from
// the source's aggregates and the warehouse's deduplicated rows, and
// reports the variables that disagree. Its ports are in the pipeline's
// terms; the adapters (extract/fleet, load/clickhouse) implement them, and
// cmd prints the report.
package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// sumTolerance is the relative difference under which the source's and the
// warehouse's sums are equal: both add the same float64 values, in different
// orders.
const sumTolerance = 1e-9

// How a variable's source numbers were obtained (Mismatch.Via).
const (
	ViaAggregation = "aggregation"
	ViaStatistics  = "statistics"
)

// Source is the source's side of verification: an aggregate of many
// variables per request, and the statistic of one variable.
type Source interface {
	// Aggregate returns the aggregate fn ("count" or "sum") of each of ids
	// over [start, end], in the order of ids, each naming its variable. An
	// error wrapping ErrUnreadable says the response could not be read
	// with certainty (or the request was refused for this input): those
	// variables are then read singly.
	Aggregate(ctx context.Context, ids []string, fn string, start, end int64) ([]Value, error)
	// Statistic returns the statistic fn of one variable over [start, end];
	// ok is false when the service gave null.
	Statistic(ctx context.Context, variableID, fn string, start, end int64) (value float64, ok bool, err error)
}

// Value is one variable's aggregate; HasValue is false for a null.
type Value struct {
	VariableID string
	Value      float64
	HasValue   bool
}

// ErrUnreadable marks an aggregate response the Source could not read with
// certainty.
var ErrUnreadable = errors.New("aggregation response not readable with certainty")

// Stats summarises one variable's points in the warehouse over a range.
type Stats struct {
	Count        uint64
	Sum          float64
	MinTs, MaxTs int64
}

// Warehouse is the warehouse's side of verification.
type Warehouse interface {
	// PointStats returns the stats of every variable with points in
	// [from, to], deduplicated.
	PointStats(ctx context.Context, from, to int64) (map[string]Stats, error)
}

// Options size the verification's requests.
type Options struct {
	// PerRequest is the number of variables per aggregation request.
	PerRequest int
	// InFlight bounds the concurrent requests.
	InFlight int
}

// sourceStat is the source's count and sum of one variable over the range.
type sourceStat struct {
	count int64
	sum   float64
	via   string
}

// Verifier compares the warehouse's count and sum of each variable over a
// range with the source's.
type Verifier struct {
	src  Source
	wh   Warehouse
	opts Options
	log  *zap.Logger
}

// New wires a Verifier. logger may be nil.
func New(src Source, wh Warehouse, opts Options, logger *zap.Logger) *Verifier {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Verifier{src: src, wh: wh, opts: opts, log: logger}
}

// Verify compares every variable's count and sum over [start, end] in the
// warehouse with the source's.
func (v *Verifier) Verify(ctx context.Context, vars []pipeline.Variable, start, end int64) (*Report, error) {
	wh, err := v.wh.PointStats(ctx, start, end)
	if err != nil {
		return nil, fmt.Errorf("read the warehouse's counts: %w", err)
	}
	ids := make([]string, len(vars))
	for i, vr := range vars {
		ids[i] = vr.ID
	}
	src, err := v.sourceStats(ctx, ids, start, end)
	if err != nil {
		return nil, err
	}
	// A disagreement found through the aggregation body, whose shape the
	// documentation does not show, is confirmed through the single-variable
	// endpoint before it is reported.
	var doubt []string
	for _, vr := range vars {
		if s := src[vr.ID]; s.via == ViaAggregation && !agrees(s, wh[vr.ID]) {
			doubt = append(doubt, vr.ID)
		}
	}
	if len(doubt) > 0 {
		confirmed, err := v.statistics(ctx, doubt, start, end)
		if err != nil {
			return nil, err
		}
		for id, s := range confirmed {
			src[id] = s
		}
	}
	rep := &Report{FromMs: start, ToMs: end, Variables: len(vars), Mismatches: []Mismatch{}}
	for _, vr := range vars {
		s, w := src[vr.ID], wh[vr.ID]
		if s.via == ViaAggregation {
			rep.ViaAggregation++
		} else {
			rep.ViaStatistics++
		}
		if agrees(s, w) {
			rep.Matched++
			continue
		}
		rep.Mismatches = append(rep.Mismatches, Mismatch{
			DeviceLabel: vr.DeviceLabel, VariableLabel: vr.Label, VariableID: vr.ID, DeviceID: vr.DeviceID,
			SourceCount: s.count, WarehouseCount: w.Count, SourceSum: s.sum, WarehouseSum: w.Sum,
			WarehouseMinTsMs: w.MinTs, WarehouseMaxTsMs: w.MaxTs, Via: s.via, Variable: vr,
		})
	}
	sort.Slice(rep.Mismatches, func(i, j int) bool {
		a, b := rep.Mismatches[i], rep.Mismatches[j]
		if a.DeviceLabel != b.DeviceLabel {
			return a.DeviceLabel < b.DeviceLabel
		}
		return a.VariableLabel < b.VariableLabel
	})
	return rep, nil
}

// agrees compares counts exactly and sums within sumTolerance.
func agrees(s sourceStat, w Stats) bool {
	return s.count >= 0 && uint64(s.count) == w.Count && sumsEqual(s.sum, w.Sum)
}

func sumsEqual(a, b float64) bool {
	if a == b {
		return true
	}
	scale := math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
	return math.Abs(a-b) <= sumTolerance*scale
}

// sourceStats gets every variable's count and sum: through the aggregation
// POST (the joined frame, both bounds, never a limit) for many
// variables per request, and through the single-variable statistics
// endpoint for those whose aggregation result cannot be read with
// certainty. If the aggregation's numbers for a probe variable differ from
// the single-variable endpoint's, the aggregation body is not what this
// client takes it for, and every variable is read singly instead.
func (v *Verifier) sourceStats(ctx context.Context, ids []string, start, end int64) (map[string]sourceStat, error) {
	per := max(1, v.opts.PerRequest)
	var batches [][]string
	for i := 0; i < len(ids); i += per {
		batches = append(batches, ids[i:min(i+per, len(ids))])
	}
	out := make(map[string]sourceStat, len(ids))
	var mu sync.Mutex
	var single []string
	errs := pipeline.ForEach(ctx, len(batches), v.opts.InFlight, func(i int) error {
		got, unsure, err := v.aggregate(ctx, batches[i], start, end)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for id, s := range got {
			out[id] = s
		}
		single = append(single, unsure...)
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if probe, ok := probeVariable(ids, out); ok {
		check, err := v.statistics(ctx, []string{probe}, start, end)
		if err != nil {
			return nil, err
		}
		if a, s := out[probe], check[probe]; a.count != s.count || !sumsEqual(a.sum, s.sum) {
			v.log.Warn("the aggregation endpoint's numbers differ from the single-variable statistics; reading every variable singly",
				zap.String("probe_variable", probe), zap.Int64("aggregation_count", a.count), zap.Int64("statistics_count", s.count),
				zap.Float64("aggregation_sum", a.sum), zap.Float64("statistics_sum", s.sum))
			out = map[string]sourceStat{probe: s}
			single = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == probe })
		}
	}
	if len(single) > 0 {
		got, err := v.statistics(ctx, single, start, end)
		if err != nil {
			return nil, err
		}
		for id, s := range got {
			out[id] = s
		}
	}
	return out, nil
}

// probeVariable picks the variable whose aggregation result is checked
// against the single-variable endpoint: the first with points, so that the
// check means something.
func probeVariable(ids []string, got map[string]sourceStat) (string, bool) {
	fallback := ""
	for _, id := range ids {
		s, ok := got[id]
		if !ok || s.via != ViaAggregation {
			continue
		}
		if s.count > 0 {
			return id, true
		}
		if fallback == "" {
			fallback = id
		}
	}
	return fallback, fallback != ""
}

// aggregate reads count and sum of one batch through the aggregation POST.
// unsure lists the variables whose results it could not read with
// certainty; a body it cannot decode at all makes the whole batch unsure.
//
// It asks for the joined frame: there each aggregate's column names its
// variable, whereas the spec does not say in which order the per-variable
// results come, and a guessed order would report false mismatches. A
// variable the joined frame gives no value (an empty range joins no row)
// is unsure and read singly.
func (v *Verifier) aggregate(ctx context.Context, ids []string, start, end int64) (map[string]sourceStat, []string, error) {
	results := map[string][2]Value{}
	for k, fn := range []string{"count", "sum"} {
		vals, err := v.src.Aggregate(ctx, ids, fn, start, end)
		if err != nil {
			if !errors.Is(err, ErrUnreadable) {
				return nil, nil, fmt.Errorf("source statistics: %w", err)
			}
			v.log.Info("aggregation response not readable with certainty; reading these variables singly",
				zap.Int("variables", len(ids)), zap.Error(err))
			return nil, ids, nil
		}
		if len(vals) != len(ids) {
			return nil, ids, nil
		}
		for i, val := range vals {
			if val.VariableID != ids[i] {
				return nil, ids, nil
			}
			r := results[val.VariableID]
			r[k] = val
			results[val.VariableID] = r
		}
	}
	out := make(map[string]sourceStat, len(ids))
	var unsure []string
	for _, id := range ids {
		r := results[id]
		count, sum := r[0], r[1]
		n, ok := wholeCount(count.Value, count.HasValue)
		switch {
		case !ok:
			unsure = append(unsure, id)
		case !sum.HasValue && n != 0:
			unsure = append(unsure, id)
		default:
			out[id] = sourceStat{count: n, sum: sum.Value, via: ViaAggregation}
		}
	}
	return out, unsure, nil
}

// wholeCount reads a count: a non-negative integral number.
func wholeCount(v float64, ok bool) (int64, bool) {
	if !ok || v < 0 || v != math.Trunc(v) || v > 1<<53 {
		return 0, false
	}
	return int64(v), true
}

// statistics reads count and sum of each variable through the
// single-variable statistics endpoint (two requests per variable).
func (v *Verifier) statistics(ctx context.Context, ids []string, start, end int64) (map[string]sourceStat, error) {
	out := make(map[string]sourceStat, len(ids))
	var mu sync.Mutex
	errs := pipeline.ForEach(ctx, len(ids), v.opts.InFlight, func(i int) error {
		id := ids[i]
		c, ok, err := v.src.Statistic(ctx, id, "count", start, end)
		if err != nil {
			return fmt.Errorf("source statistics: %w", err)
		}
		// A null count is read as none: the spec does not say what an
		// empty range gives, and null is the natural "no points" there.
		if !ok {
			c, ok = 0, true
		}
		n, whole := wholeCount(c, ok)
		if !whole {
			return fmt.Errorf("source statistics: count of variable %s is %v, not a whole number; cannot verify it", id, c)
		}
		s, ok, err := v.src.Statistic(ctx, id, "sum", start, end)
		if err != nil {
			return fmt.Errorf("source statistics: %w", err)
		}
		if !ok && n != 0 {
			return fmt.Errorf("source statistics: sum of variable %s is null over %d points; cannot verify it", id, n)
		}
		mu.Lock()
		out[id] = sourceStat{count: n, sum: s, via: ViaStatistics}
		mu.Unlock()
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
