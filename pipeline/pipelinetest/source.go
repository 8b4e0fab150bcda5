package pipelinetest

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Cut is which rows a Source serves of a frame its request's limit cuts,
// and in which order it serves a frame: the spec allows any.
type Cut int

// The cuts a Source can make.
const (
	// CutAny keeps any rows of a cut frame, served in a random order; a
	// whole frame is served oldest first. The default.
	CutAny Cut = iota
	// CutNewestDesc keeps the newest rows, and serves every frame newest
	// first (the Fleet Telemetry Service's and fleetsim's default).
	CutNewestDesc
	// CutOldestAsc keeps the oldest rows, served oldest first.
	CutOldestAsc
	// CutNewestAsc keeps the newest rows, served oldest first.
	CutNewestAsc
	// CutNewestShuffled keeps the newest rows, and serves every frame in
	// a random order.
	CutNewestShuffled
	// CutAnyShuffled keeps any rows, and serves every frame in a random
	// order.
	CutAnyShuffled
)

// String names the cut as subtests do.
func (c Cut) String() string {
	return [...]string{"any", "newest-desc", "oldest-asc", "newest-asc", "newest-shuffled", "any-shuffled"}[c]
}

// Source is a telemetry service in memory: variables (each listed by Walk
// with its device) and the points of each, served a window at a time
// with the service's limit rule. It is also a pipeline.CountSource, used
// only where a test wires it as EngineOptions.Counts. Its zero value is
// an empty service; set the fields before the source is used.
type Source struct {
	// Cut is which rows a cut frame keeps and in which order frames are
	// served.
	Cut Cut
	// Floor is the service's real retention floor: a request starting
	// below it fails with a RetentionError before anything is served.
	Floor int64
	// OnSeries, when set, is called for every Series request (after the
	// floor's check) in place of serving it; serve serves the request into
	// a sink as the source would have. A hook that fails, delays, cuts a
	// response mid-stream or watches what is served does so around serve.
	OnSeries func(req pipeline.SeriesRequest, sink pipeline.FrameSink, serve func(pipeline.FrameSink) error) error
	// OnWalk, when set, is called for every Walk in place of the walk;
	// walk hands the devices and variables to a sink as Walk would have.
	// A hook that fails a walk, at once or part way, or hands it twice,
	// does so around walk.
	OnWalk func(sink pipeline.WalkSink, walk func(pipeline.WalkSink) error) error
	// OnCount, when set, is called before every Count; an error it
	// returns is Count's.
	OnCount func(ids []string, start, end int64) error

	mu       sync.Mutex
	devices  []pipeline.Device
	vars     []pipeline.Variable // in the order added
	points   map[string][]pipeline.Point
	rng      *rand.Rand
	requests int
	counts   int
}

// RetentionError is the service's rejection of a window starting below its
// retention floor (403003).
type RetentionError struct{}

// Error says what the service says.
func (RetentionError) Error() string { return "403003 retention" }

// RetentionExceeded marks it as a pipeline.RetentionError.
func (RetentionError) RetentionExceeded() bool { return true }

// Fixture is a Source of nVars variables v000, v001, ... of device d1,
// each with nPoints points a second apart from start (variable v's offset
// by v ms; odd variables carry a position), and a target for each that
// reads all of them.
func Fixture(nVars, nPoints int, start int64) (*Source, []pipeline.Target) {
	src := &Source{}
	var targets []pipeline.Target
	for v := range nVars {
		id := fmt.Sprintf("v%03d", v)
		vr := pipeline.Variable{ID: id, Label: "var" + id, DeviceID: "d1", DeviceLabel: "dev"}
		pts := make([]pipeline.Point, 0, nPoints)
		for p := range nPoints {
			pt := pipeline.Point{TsMs: start + int64(p)*1000 + int64(v), Value: float64(p), Context: []byte("{}")}
			if v%2 == 1 {
				// The source reads the position (extract/fleet for the API).
				pt.Context = []byte(fmt.Sprintf(`{"lat":%d.5,"lng":-%d.25}`, p, v))
				pt.Lat, pt.Lng, pt.HasLat, pt.HasLng = float64(p)+0.5, -float64(v)-0.25, true, true
			}
			pts = append(pts, pt)
		}
		src.SetVariable(vr)
		src.Add(vr.ID, pts...)
		targets = append(targets, pipeline.Target{Variable: vr, Start: start, End: start + int64(nPoints)*1000 + 1000, From: start})
	}
	return src, targets
}

// SetDevices sets the devices Walk hands before the variables (none by
// default).
func (s *Source) SetDevices(devices ...pipeline.Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devices = slices.Clone(devices)
}

// SetVariable lists v, or replaces the variable of its id (its points
// stay).
func (s *Source) SetVariable(v pipeline.Variable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setVariable(v)
}

func (s *Source) setVariable(v pipeline.Variable) {
	if s.points == nil {
		s.points = map[string][]pipeline.Point{}
	}
	if i := slices.IndexFunc(s.vars, func(o pipeline.Variable) bool { return o.ID == v.ID }); i >= 0 {
		s.vars[i] = v
		return
	}
	s.vars = append(s.vars, v)
	if _, ok := s.points[v.ID]; !ok {
		s.points[v.ID] = nil
	}
}

// Variable returns the variable of id as Walk lists it.
func (s *Source) Variable(id string) (pipeline.Variable, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.vars, func(o pipeline.Variable) bool { return o.ID == id })
	if i < 0 {
		return pipeline.Variable{}, false
	}
	return s.vars[i], true
}

// Add writes points to variable id, kept in time order (points of one
// timestamp in the order written). A variable not yet listed is listed,
// as variable id of device "d".
func (s *Source) Add(id string, pts ...pipeline.Point) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.points[id]; !ok {
		s.setVariable(pipeline.Variable{ID: id, DeviceID: "d"})
	}
	byTs := func(a, b pipeline.Point) int { return cmp.Compare(a.TsMs, b.TsMs) }
	old := s.points[id]
	all := append(old, pts...)
	if len(old) > 0 && len(pts) > 0 && pts[0].TsMs < old[len(old)-1].TsMs || !slices.IsSortedFunc(pts, byTs) {
		slices.SortStableFunc(all, byTs)
	}
	s.points[id] = all
}

// DropBefore deletes every point stamped before ms, as the service does
// with what falls out of its retention.
func (s *Source) DropBefore(ms int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, pts := range s.points {
		s.points[id] = slices.DeleteFunc(pts, func(p pipeline.Point) bool { return p.TsMs < ms })
	}
}

// IDs returns the ids of the variables listed, in the order added.
func (s *Source) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(s.vars))
	for i, v := range s.vars {
		ids[i] = v.ID
	}
	return ids
}

// Points returns a copy of variable id's points, in time order.
func (s *Source) Points(id string) []pipeline.Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.points[id])
}

// Requests is the number of Series requests made so far.
func (s *Source) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Counts is the number of Count requests made so far.
func (s *Source) Counts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// Walk hands the devices, then every variable in one page, whatever the
// scope.
func (s *Source) Walk(ctx context.Context, _ pipeline.Scope, sink pipeline.WalkSink) error {
	s.mu.Lock()
	hook := s.OnWalk
	s.mu.Unlock()
	walk := func(sink pipeline.WalkSink) error { return s.walk(ctx, sink) }
	if hook != nil {
		return hook(sink, walk)
	}
	return walk(sink)
}

func (s *Source) walk(ctx context.Context, sink pipeline.WalkSink) error {
	s.mu.Lock()
	devices, vars := slices.Clone(s.devices), slices.Clone(s.vars)
	s.mu.Unlock()
	if len(devices) > 0 {
		if err := sink.Devices(ctx, devices); err != nil {
			return err
		}
	}
	return sink.Variables(ctx, vars)
}

// Series serves req as the service does: frame i holds the points of
// req.VariableIDs[i] in [req.Start, req.End], at most req.Limit of them
// (which ones, and in which order, as Cut says).
func (s *Source) Series(_ context.Context, req pipeline.SeriesRequest, sink pipeline.FrameSink) error {
	s.mu.Lock()
	s.requests++
	floor, hook := s.Floor, s.OnSeries
	s.mu.Unlock()
	if req.Start < floor {
		return RetentionError{}
	}
	if hook != nil {
		return hook(req, sink, func(sink pipeline.FrameSink) error { return s.serve(req, sink) })
	}
	return s.serve(req, sink)
}

func (s *Source) serve(req pipeline.SeriesRequest, sink pipeline.FrameSink) error {
	for i, id := range req.VariableIDs {
		if err := ServeFrame(sink, i, s.Frame(id, req)); err != nil {
			return err
		}
	}
	return nil
}

// Frame returns the rows the source serves of variable id for req, in the
// order served.
func (s *Source) Frame(id string, req pipeline.SeriesRequest) []pipeline.Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(1, 2))
	}
	var in []pipeline.Point // oldest first
	for _, p := range s.points[id] {
		if p.TsMs >= req.Start && p.TsMs <= req.End {
			in = append(in, p)
		}
	}
	shuffle := func() { s.rng.Shuffle(len(in), func(a, b int) { in[a], in[b] = in[b], in[a] }) }
	if req.Limit > 0 && len(in) > req.Limit {
		switch s.Cut {
		case CutAny, CutAnyShuffled:
			shuffle()
			in = in[:req.Limit]
		case CutOldestAsc:
			in = in[:req.Limit]
		default:
			in = in[len(in)-req.Limit:]
		}
	}
	switch s.Cut {
	case CutNewestDesc:
		slices.Reverse(in)
	case CutNewestShuffled, CutAnyShuffled:
		shuffle()
	}
	return in
}

// ServeFrame hands pts to sink as frame i, then ends the frame.
func ServeFrame(sink pipeline.FrameSink, i int, pts []pipeline.Point) error {
	for _, p := range pts {
		if err := sink.Point(i, p); err != nil {
			return err
		}
	}
	return sink.EndFrame(i, len(pts))
}

// Count counts the points of each of ids in [start, end].
func (s *Source) Count(_ context.Context, ids []string, start, end int64) ([]int64, error) {
	s.mu.Lock()
	hook := s.OnCount
	s.mu.Unlock()
	if hook != nil {
		if err := hook(ids, start, end); err != nil {
			s.mu.Lock()
			s.counts++
			s.mu.Unlock()
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts++
	out := make([]int64, len(ids))
	for i, id := range ids {
		for _, p := range s.points[id] {
			if p.TsMs >= start && p.TsMs <= end {
				out[i]++
			}
		}
	}
	return out, nil
}
