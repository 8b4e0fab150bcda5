package pipeline

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// moveFloor reacts to a 403003: the account's window is shorter than
// configured (or the service's clock is ahead of ours). It searches the
// service's real floor with probes of one millisecond (see findFloor) and
// moves the floor to it plus FloorMargin, so that nothing the service still
// holds is skipped and the search costs a few dozen requests, not one per
// hour of the gap. Points before the new floor are out of reach; that is
// logged once per run. An error is a probe's failure for another reason.
func (p *pass) moveFloor(ctx context.Context, req *request, err error) error {
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	cur := p.floor.Load()
	if req.start < cur {
		return nil // another request moved it already; retry at the new floor
	}
	found, perr := p.findFloor(ctx, req.targets[0].Variable.ID, max(cur, req.start), req.end)
	if perr != nil {
		return fmt.Errorf("searching the service's retention floor after %w: %w", err, perr)
	}
	next := found + p.e.opts.FloorMargin.Milliseconds()
	p.floor.Store(next)
	if !p.moved {
		p.e.log.Warn("the service rejected a range as past its retention window; moving the retention floor forward (set source.retention to the account's real window to avoid this)",
			zap.String("configured_floor", msTime(p.e.opts.Floor)), zap.String("service_floor", msTime(found)),
			zap.String("new_floor", msTime(next)), zap.Error(err))
	}
	p.moved = true
	return nil
}

// floorResolution is how close findFloor gets to the service's floor.
const floorResolution = int64(time.Second / time.Millisecond)

// findFloor returns the earliest start (within floorResolution) that the
// service accepts for the variable id, given that it rejected lo; end+1
// when it rejects everything up to end. It probes [t, t] windows: forward
// in doubling steps from one hour until one is accepted, then by bisection
// between the last rejected and the first accepted probe.
func (p *pass) findFloor(ctx context.Context, id string, lo, end int64) (int64, error) {
	probe := func(at int64) (bool, error) {
		p.requests.Add(1)
		err := p.e.src.Series(ctx, SeriesRequest{VariableIDs: []string{id}, Start: at, End: at, Limit: 1}, discardSink{})
		switch {
		case err == nil:
			return true, nil
		case IsRetention(err):
			return false, nil
		default:
			return false, err
		}
	}
	hi := end + 1 // accepted, or past the window
	for step := int64(time.Hour / time.Millisecond); lo+step < hi; step *= 2 {
		ok, err := probe(lo + step)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = lo + step
			break
		}
		lo += step
	}
	for hi-lo > floorResolution {
		mid := lo + (hi-lo)/2
		ok, err := probe(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// discardSink drops the rows of a floor probe.
type discardSink struct{}

func (discardSink) Point(int, Point) error  { return nil }
func (discardSink) EndFrame(int, int) error { return nil }
