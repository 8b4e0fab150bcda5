package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline"
)

// sumTolerance is the relative difference under which the source's and the
// warehouse's sums are equal: both add the same float64 values, in different
// orders.
const sumTolerance = 1e-9

// How a variable's source numbers were obtained.
const (
	viaAggregation = "aggregation"
	viaStatistics  = "statistics"
)

func cmdVerify(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync verify --config FILE --from T --to T [--json] [--repair]")
	fromS := fs.String("from", "", "start of the range, inclusive (RFC 3339 or POSIX ms); moved up to the retention floor if older")
	toS := fs.String("to", "", "end of the range, inclusive (RFC 3339 or POSIX ms)")
	asJSON := fs.Bool("json", false, "print JSON for machines")
	repair := fs.Bool("repair", false, "re-extract the mismatching variables over the range, then verify them again")
	a, from, to, err := startForRange(ctx, env, fs, cfgPath, args, fromS, toS)
	if err != nil {
		return err
	}
	defer a.Close()
	// Every request stays inside retention (plus the sync's margin) and
	// before now, so the service never rejects the range.
	now := time.Now()
	floor := a.syncer.Floor(now)
	start, end := max(from, floor), min(to, now.UnixMilli())
	if start > end {
		return usagef("the range %s..%s lies before the retention window (which starts at %s) or in the future",
			msText(from), msText(to), msText(floor))
	}
	_, vars, err := a.src.Walk(ctx, a.syncOptions().Scope)
	if err != nil {
		return fmt.Errorf("list the in-scope variables: %w", err)
	}
	v := &verifier{src: a.api, wh: a.ch, perRequest: a.cfg.Sync.VariablesPerRequest, inFlight: a.cfg.Sync.MaxInFlight, log: a.log.Named("verify")}
	rep, err := v.verify(ctx, vars, start, end)
	if err != nil {
		return err
	}
	rep.RequestedFrom, rep.RequestedTo = from, to
	if *repair && len(rep.Mismatches) > 0 {
		bad := make([]pipeline.Variable, len(rep.Mismatches))
		for i, m := range rep.Mismatches {
			bad[i] = m.variable
		}
		sum, err := a.syncer.BackfillVariables(ctx, bad, start, end)
		a.logSummary("repair", sum, err)
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		after, err := v.verify(ctx, bad, start, end)
		if err != nil {
			return fmt.Errorf("verify after the repair: %w", err)
		}
		rep.Repair = &repairReport{Variables: len(bad), Points: sum.Points, Failed: len(sum.Failed), Remaining: after.Mismatches}
	}
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := rep.print(env.stdout); err != nil {
		return err
	}
	return rep.result()
}

func msText(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// statsSource is the source's side of verify: the aggregation POST for many
// variables per request and the single-variable statistics endpoint.
type statsSource interface {
	Aggregate(ctx context.Context, req fleetapi.AggregationRequest) ([]fleetapi.AggregateValue, error)
	Statistic(ctx context.Context, variableID, function string, start, end int64) (float64, bool, error)
}

// warehouseStats is the warehouse's side of verify.
type warehouseStats interface {
	PointStats(ctx context.Context, from, to int64) (map[string]clickhouse.Stats, error)
}

type verifier struct {
	src        statsSource
	wh         warehouseStats
	perRequest int
	inFlight   int
	log        *zap.Logger
}

// sourceStat is the source's count and sum of one variable over the range.
type sourceStat struct {
	count int64
	sum   float64
	via   string
}

// mismatch is one variable whose warehouse disagrees with the source.
type mismatch struct {
	DeviceLabel    string  `json:"device_label"`
	VariableLabel  string  `json:"variable_label"`
	VariableID     string  `json:"variable_id"`
	DeviceID       string  `json:"device_id"`
	SourceCount    int64   `json:"source_count"`
	WarehouseCount uint64  `json:"warehouse_count"`
	SourceSum      float64 `json:"source_sum"`
	WarehouseSum   float64 `json:"warehouse_sum"`
	// WarehouseMinTsMs and WarehouseMaxTsMs bound the warehouse's points in
	// the range; 0 when it has none.
	WarehouseMinTsMs int64 `json:"warehouse_min_ts_ms"`
	WarehouseMaxTsMs int64 `json:"warehouse_max_ts_ms"`
	// Via says which endpoint gave the source's numbers.
	Via string `json:"via"`

	variable pipeline.Variable
}

type repairReport struct {
	Variables int   `json:"variables"`
	Points    int64 `json:"points"`
	Failed    int   `json:"failed"`
	// Remaining are the variables that still disagree after the repair.
	Remaining []mismatch `json:"remaining"`
}

type verifyReport struct {
	FromMs        int64      `json:"from_ms"`
	ToMs          int64      `json:"to_ms"`
	RequestedFrom int64      `json:"requested_from_ms"`
	RequestedTo   int64      `json:"requested_to_ms"`
	Variables     int        `json:"variables"`
	Matched       int        `json:"matched"`
	Mismatches    []mismatch `json:"mismatches"`
	// ViaAggregation and ViaStatistics count the variables whose source
	// numbers came from each endpoint.
	ViaAggregation int           `json:"via_aggregation"`
	ViaStatistics  int           `json:"via_statistics"`
	Repair         *repairReport `json:"repair,omitempty"`
}

// verify compares every variable's count and sum over [start, end] in the
// warehouse with the source's.
func (v *verifier) verify(ctx context.Context, vars []pipeline.Variable, start, end int64) (*verifyReport, error) {
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
		if s := src[vr.ID]; s.via == viaAggregation && !agrees(s, wh[vr.ID]) {
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
	rep := &verifyReport{FromMs: start, ToMs: end, Variables: len(vars), Mismatches: []mismatch{}}
	for _, vr := range vars {
		s, w := src[vr.ID], wh[vr.ID]
		if s.via == viaAggregation {
			rep.ViaAggregation++
		} else {
			rep.ViaStatistics++
		}
		if agrees(s, w) {
			rep.Matched++
			continue
		}
		rep.Mismatches = append(rep.Mismatches, mismatch{
			DeviceLabel: vr.DeviceLabel, VariableLabel: vr.Label, VariableID: vr.ID, DeviceID: vr.DeviceID,
			SourceCount: s.count, WarehouseCount: w.Count, SourceSum: s.sum, WarehouseSum: w.Sum,
			WarehouseMinTsMs: w.MinTs, WarehouseMaxTsMs: w.MaxTs, Via: s.via, variable: vr,
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
func agrees(s sourceStat, w clickhouse.Stats) bool {
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
func (v *verifier) sourceStats(ctx context.Context, ids []string, start, end int64) (map[string]sourceStat, error) {
	per := max(1, v.perRequest)
	var batches [][]string
	for i := 0; i < len(ids); i += per {
		batches = append(batches, ids[i:min(i+per, len(ids))])
	}
	out := make(map[string]sourceStat, len(ids))
	var mu sync.Mutex
	var single []string
	errs := pipeline.ForEach(ctx, len(batches), v.inFlight, func(i int) error {
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
		if !ok || s.via != viaAggregation {
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
func (v *verifier) aggregate(ctx context.Context, ids []string, start, end int64) (map[string]sourceStat, []string, error) {
	results := map[string][2]fleetapi.AggregateValue{}
	for k, fn := range []string{"count", "sum"} {
		vals, err := v.src.Aggregate(ctx, fleetapi.AggregationRequest{VariableIDs: ids, Aggregation: fn, Joined: true, Start: start, End: end})
		if err != nil {
			if !unreadable(err) {
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
			out[id] = sourceStat{count: n, sum: sum.Value, via: viaAggregation}
		}
	}
	return out, unsure, nil
}

// unreadable tells a response this client could not read (or the endpoint
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

// wholeCount reads a count: a non-negative integral number.
func wholeCount(v float64, ok bool) (int64, bool) {
	if !ok || v < 0 || v != math.Trunc(v) || v > 1<<53 {
		return 0, false
	}
	return int64(v), true
}

// statistics reads count and sum of each variable through the
// single-variable statistics endpoint (two requests per variable).
func (v *verifier) statistics(ctx context.Context, ids []string, start, end int64) (map[string]sourceStat, error) {
	out := make(map[string]sourceStat, len(ids))
	var mu sync.Mutex
	errs := pipeline.ForEach(ctx, len(ids), v.inFlight, func(i int) error {
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
		out[id] = sourceStat{count: n, sum: s, via: viaStatistics}
		mu.Unlock()
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (r *verifyReport) remaining() []mismatch {
	if r.Repair != nil {
		return r.Repair.Remaining
	}
	return r.Mismatches
}

func (r *verifyReport) print(w io.Writer) error {
	if len(r.Mismatches) > 0 {
		if err := printMismatches(w, r.Mismatches); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	clamped := ""
	if r.FromMs != r.RequestedFrom || r.ToMs != r.RequestedTo {
		clamped = " (clamped to the retention window and now)"
	}
	fmt.Fprintf(w, "verified %d variables over %s..%s%s: %d match, %d mismatch (source numbers: %d by aggregation, %d by single statistics)\n",
		r.Variables, msText(r.FromMs), msText(r.ToMs), clamped, r.Matched, len(r.Mismatches), r.ViaAggregation, r.ViaStatistics)
	if r.Repair != nil {
		fmt.Fprintf(w, "repair: re-extracted %d variables (%d points, %d failed); %d still mismatch\n",
			r.Repair.Variables, r.Repair.Points, r.Repair.Failed, len(r.Repair.Remaining))
		if len(r.Repair.Remaining) > 0 {
			fmt.Fprintln(w)
			return printMismatches(w, r.Repair.Remaining)
		}
	}
	return nil
}

func printMismatches(w io.Writer, ms []mismatch) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tVARIABLE\tSOURCE COUNT\tWAREHOUSE COUNT\tSOURCE SUM\tWAREHOUSE SUM\tWAREHOUSE FIRST..LAST")
	for _, m := range ms {
		span := "-"
		if m.WarehouseCount > 0 {
			span = msText(m.WarehouseMinTsMs) + ".." + msText(m.WarehouseMaxTsMs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.10g\t%.10g\t%s\n", m.DeviceLabel, m.VariableLabel, m.SourceCount, m.WarehouseCount, m.SourceSum, m.WarehouseSum, span)
	}
	return tw.Flush()
}

// result is the command's error: exit 1 while any variable disagrees.
func (r *verifyReport) result() error {
	left := r.remaining()
	if len(left) == 0 {
		return nil
	}
	first := left[0]
	hint := "run 'fleetsync verify --repair' with the same range to re-extract them"
	if r.Repair != nil {
		hint = "re-extraction did not fix them; the warehouse may hold points the source no longer has"
	}
	return &failedError{fmt.Sprintf("%d of %d variables disagree with the source over %s..%s (first: %s/%s source %d points, warehouse %d); %s",
		len(left), r.Variables, msText(r.FromMs), msText(r.ToMs), first.DeviceLabel, first.VariableLabel, first.SourceCount, first.WarehouseCount, hint)}
}
