package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// cycleWalk is the WalkSink of a cycle: it hands each part of the walk to
// the metadata stage, and reads the marks of, plans, moves and measures
// the lag of the variables MoveChunk at a time, so that a cycle holds one
// chunk of the fleet and its marks, never the whole walk or every mark. A chunk's requests
// never mix with the next one's, which costs at most one request a chunk
// that is not full. A retention floor the service moved forward holds for
// the chunks after, and the first failed commit of marks stops the walk,
// as one engine run would stop.
type cycleWalk struct {
	s    *Syncer
	clk  *stageClock
	meta SnapshotRun
	po   PlanOptions
	// floor is the cycle's retention floor, which the lag is computed
	// from even after the service moved the reads' floor forward.
	floor int64
	chunk int
	// pending is the chunk being filled, seen its ids: a variable handed
	// twice within one chunk is planned, counted and measured once. One
	// handed again in a later chunk (a listing that started over, or fell
	// back from the account-wide list to each device's) is planned against
	// the mark its first move committed, read with that chunk's marks,
	// and counted and measured again: telling it apart would take a set of
	// every id of the fleet, which the cycle does not hold. The listing's
	// own paging already drops ids it has handed (fleetapi's keySet), so
	// only a fallback can count a variable twice.
	pending []Variable
	seen    map[string]bool
	// reported is whether a variable walked so far had a lastActivity
	// (see lastActivityReported): until one has, none is skipped as idle.
	reported bool
	devices  int
	vars     int
	toRead   int
	skipped  int
	res      RunResult
	lag      lagSum
	// inSink is the time the walk spent handing on, in the other stages.
	inSink time.Duration
	// plan makes a chunk's targets (nil: planWith, a cycle's plan), and
	// markFn their marks; lagless leaves out the lag stage (a backfill's).
	plan    func(part []Variable, marks *chunkMarks) ([]Target, int)
	markFn  MarkFunc
	lagless bool
}

// DefaultMoveChunk is how many variables a cycle plans and moves at a
// time when SyncOptions.MoveChunk is 0.
const DefaultMoveChunk = 20000

func (s *Syncer) newCycleWalk(clk *stageClock, po PlanOptions, floor int64) *cycleWalk {
	w := &cycleWalk{s: s, clk: clk, po: po, floor: floor, chunk: s.opts.MoveChunk, seen: map[string]bool{}, markFn: IncrementalMark}
	if w.chunk <= 0 {
		w.chunk = DefaultMoveChunk
	}
	return w
}

// run walks scope into w and moves the last chunk. The variables walked
// before a failure are moved all the same (one device whose listing fails
// every cycle must not hold back the last chunk for ever), unless the
// run was cancelled.
func (w *cycleWalk) run(ctx context.Context, scope Scope) error {
	start := time.Now()
	err := w.s.src.Walk(ctx, scope, w)
	w.clk.add(StageWalk, time.Since(start)-w.inSink, err)
	if ctx.Err() == nil {
		if ferr := w.flush(ctx); err == nil {
			err = ferr
		}
	}
	return err
}

func (w *cycleWalk) Devices(ctx context.Context, devices []Device) error {
	defer w.timeSink(time.Now())
	w.devices += len(devices)
	if w.meta == nil {
		return nil
	}
	return w.clk.run(ctx, StageMetadata, func(ctx context.Context) error { return w.meta.Devices(ctx, devices) })
}

func (w *cycleWalk) Variables(ctx context.Context, vars []Variable) error {
	defer w.timeSink(time.Now())
	if w.meta != nil {
		if err := w.clk.run(ctx, StageMetadata, func(ctx context.Context) error { return w.meta.Variables(ctx, vars) }); err != nil {
			return err
		}
	}
	for _, v := range vars {
		if w.seen[v.ID] {
			continue
		}
		w.seen[v.ID] = true
		w.vars++
		// What only the metadata needed is not kept.
		v.Properties, v.Name = nil, ""
		w.pending = append(w.pending, v)
		if len(w.pending) >= w.chunk {
			if err := w.flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *cycleWalk) timeSink(start time.Time) { w.inSink += time.Since(start) }

// flush reads the marks of, plans, moves and measures the lag of the
// pending chunk.
func (w *cycleWalk) flush(ctx context.Context) error {
	if len(w.pending) == 0 {
		return nil
	}
	part := w.pending
	w.pending = w.pending[:0]
	clear(w.seen)
	w.reported = w.reported || lastActivityReported(part)
	w.po.reported = w.reported
	var targets []Target
	var marks *chunkMarks
	if err := w.clk.run(ctx, StagePlan, func(ctx context.Context) (err error) {
		if marks, err = loadChunkMarks(ctx, w.s.st, part); err != nil {
			return fmt.Errorf("load marks: %w", err)
		}
		var skipped int
		if w.plan != nil {
			targets, skipped = w.plan(part, marks)
		} else {
			targets, skipped = planWith(part, marks.get, w.po)
		}
		w.toRead += len(targets)
		w.skipped += skipped
		return nil
	}); err != nil {
		return err
	}
	if len(targets) > 0 {
		var res RunResult
		_ = w.clk.run(ctx, StageMove, func(ctx context.Context) error {
			res = w.s.moveTo(ctx, marks, targets, w.po.Floor, w.markFn)
			return res.err()
		})
		w.res.add(res)
		for _, l := range res.Links {
			w.clk.add(l.Stage, l.Took, l.Err)
		}
		if res.FloorMovedTo != 0 {
			w.po.Floor = max(w.po.Floor, res.FloorMovedTo)
		}
		if res.CommitErr != nil {
			return res.CommitErr
		}
	}
	if w.lagless {
		return nil
	}
	return w.clk.run(ctx, StageLag, func(context.Context) error {
		w.s.lag(part, marks.get, w.floor, &w.lag)
		return nil
	})
}

// chunkMarks are the marks of a chunk of a cycle's variables, read when
// it is planned and kept as a few integers a variable: the StateStore its
// engine run commits through, which merges each committed mark into them
// as every store does (MergeMark), so that the lag is computed without
// reading them again.
type chunkMarks struct {
	StateStore
	mu    sync.Mutex
	marks map[string]markVals
}

// loadChunkMarks reads the marks of vars from st.
func loadChunkMarks(ctx context.Context, st StateStore, vars []Variable) (*chunkMarks, error) {
	ids := make([]string, len(vars))
	for i, v := range vars {
		ids[i] = v.ID
	}
	c := &chunkMarks{StateStore: st, marks: make(map[string]markVals, len(ids))}
	err := st.MarksOf(ctx, ids, func(m Mark) error {
		c.marks[m.VariableID] = valsOf(m)
		return nil
	})
	return c, err
}

// Commit commits through the store, then merges what it committed.
func (c *chunkMarks) Commit(ctx context.Context, ms []Mark) error {
	if err := c.StateStore.Commit(ctx, ms); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range ms {
		v, ok := c.marks[m.VariableID]
		c.marks[m.VariableID] = valsOf(MergeMark(v.mark(m.VariableID), ok, m))
	}
	return nil
}

// get is the mark of one variable (without UpdatedAt, which a cycle does
// not read).
func (c *chunkMarks) get(id string) (Mark, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.marks[id]
	if !ok {
		return Mark{}, false
	}
	return v.mark(id), true
}
