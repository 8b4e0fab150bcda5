package pipeline

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// retentionFloor is the earliest timestamp a pass's requests reach: the
// configured floor, moved forward when the service rejects a range as
// past its retention.
type retentionFloor struct {
	e *Engine
	// lock holds one search at a time: a channel, not a mutex, since a
	// search calls the source while it holds it (turns.go).
	lock chan struct{}
	at   atomic.Int64
	// moved is set once a rejection moved at; probes counts the requests
	// the searches cost.
	moved  bool
	probes atomic.Int64
}

// newRetentionFloor is a floor at at.
func newRetentionFloor(e *Engine, at int64) *retentionFloor {
	f := &retentionFloor{e: e, lock: make(chan struct{}, 1)}
	f.at.Store(at)
	return f
}

// move reacts to a RetentionError (err) for a request of variable id over [start,
// end]: the account's window is shorter than configured (or the service's
// clock is ahead of ours). It searches the service's real floor with probes
// of one millisecond (see find) and moves the floor to it plus
// FloorMargin, so that nothing the service still holds is skipped and the
// search costs a few dozen requests, not one per hour of the gap. Points
// before the new floor are out of reach; that is logged once per run. An
// error is a probe's failure for another reason.
func (f *retentionFloor) move(ctx context.Context, id string, start, end int64, err error) error {
	f.lock <- struct{}{}
	defer func() { <-f.lock }()
	turn(ctx)
	cur := f.at.Load()
	if start < cur {
		return nil // another request moved it already; retry at the new floor
	}
	found, perr := f.find(ctx, id, max(cur, start), end)
	if perr != nil {
		return fmt.Errorf("searching the service's retention floor after %w: %w", err, perr)
	}
	next := found + f.e.opts.FloorMargin.Milliseconds()
	f.at.Store(next)
	if !f.moved {
		f.e.log.Warn("the service rejected a range as past its retention window; moving the retention floor forward (set source.retention to the account's real window to avoid this)",
			zap.String("configured_floor", msTime(f.e.opts.Floor)), zap.String("service_floor", msTime(found)),
			zap.String("new_floor", msTime(next)), zap.Error(err))
	}
	f.moved = true
	return nil
}

// movedTo is the floor when a rejection moved it, zero otherwise; the pass
// reads it once its fetchers are done.
func (f *retentionFloor) movedTo() int64 {
	f.lock <- struct{}{}
	defer func() { <-f.lock }()
	if !f.moved {
		return 0
	}
	return f.at.Load()
}

// floorResolution is how close find gets to the service's floor.
const floorResolution = int64(time.Second / time.Millisecond)

// find returns the earliest start (within floorResolution) that the
// service accepts for the variable id, given that it rejected lo; end+1
// when it rejects everything up to end. It probes [t, t] windows: forward
// in doubling steps from one hour until one is accepted, then by bisection
// between the last rejected and the first accepted probe.
func (f *retentionFloor) find(ctx context.Context, id string, lo, end int64) (int64, error) {
	probe := func(at int64) (bool, error) {
		f.probes.Add(1)
		err := f.e.src.Series(ctx, SeriesRequest{VariableIDs: []string{id}, Start: at, End: at, Limit: 1}, discardSink{})
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
