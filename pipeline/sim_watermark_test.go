package pipeline_test

import (
	"context"
	"fmt"
	"math"
	"strings"

	. "github.com/fleetsync/fleetsync/pipeline"
)

// The settled watermark in the simulation: every published watermark is
// kept with the variables that held points when its publisher's run
// began (its view holds at least those) and that its walk listed, and
// every INSERT of a run that began after the publication is held to it:
// no row of such a variable stamped before it that the warehouse did not
// hold already (the contract: a cycle never loads a point stamped before
// a watermark published earlier; backfills are exempt and say so), not
// even one the warehouse holds already: a read that starts below the
// watermark can find a point written after it was published. A variable a
// shifting page dropped from the publisher's walk is not held to it: the
// watermark covers the variables the walk listed (docs/reliability.md says
// so).

// simWatermark is one publication: the fleet's (scope "") with its
// holders, and, for any scope, each variable's own settled value in the
// store then (settledNow).
type simWatermark struct {
	ms      int64
	holders map[string]bool
	each    map[string]int64
	// lookback is sync.lookback when it was published, widest the
	// longest any run begun since ran with, or any debt committed since
	// was reckoned under.
	lookback, widest int64
}

// simWatermarkWriter is the WatermarkWriter of one process.
type simWatermarkWriter struct{ p *simProc }

func (s simWatermarkWriter) PublishWatermark(_ context.Context, scope string, ms int64) error {
	w := s.p.w
	w.sched.call(fmt.Sprintf("publish the watermark %+d of %q", ms-simStart, scope))
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := s.p.write("watermark", scope, "watermark"); err != nil {
		return err
	}
	if ms > w.now.Load() {
		w.violate("%s published the watermark %+d, ahead of the clock %+d", s.p.name, ms-simStart, w.now.Load()-simStart)
	}
	wm := simWatermark{ms: math.MinInt64, each: w.settledNow(), lookback: w.lookback, widest: w.lookback}
	if scope == "" {
		wm.ms, wm.holders = ms, map[string]bool{}
		for id := range s.p.startHolders {
			if s.p.walked[id] {
				wm.holders[id] = true
			}
		}
	}
	w.watermarks = append(w.watermarks, wm)
	return nil
}

// settledNow is, for each variable with points under its stored mark,
// the earliest timestamp a run begun later may load (a lower bound of
// what settledOf gives it now: the floor without its margin, the clock
// less the margin): every read of such a run is planned with a mark at
// least as far, in hwm_ms and in reread_ms (MergeMark), so it starts
// there at the earliest. The watermark published is the least of these
// over the variables its walk listed; holding each variable to its own
// value checks the marks under every scope's watermark, also where
// another variable's lower value hides a variable's from the fleet's.
// Caller holds w.mu.
func (w *simWorld) settledNow() map[string]int64 {
	now, lb := w.now.Load(), w.lookback
	each := map[string]int64{}
	for id, m := range w.marks {
		if m.HwmMs <= 0 {
			continue
		}
		from := m.HwmMs - lb
		if m.RereadMs != 0 {
			from = min(from, owedUnder(m, lb))
		}
		each[id] = max(now-simRetention.Milliseconds(), min(from, now-simMargin.Milliseconds()-lb))
	}
	return each
}

// holders are the variables with points under their marks now. Caller
// holds w.mu.
func (w *simWorld) holders() map[string]bool {
	h := map[string]bool{}
	for id, m := range w.marks {
		if m.HwmMs > 0 {
			h[id] = true
		}
	}
	return h
}

// checkWatermarks holds the rows p is inserting to the watermarks
// published before p's run began. Caller holds w.mu.
func (w *simWorld) checkWatermarks(p *simProc, rows []Row) {
	if strings.HasPrefix(p.name, "backfill") {
		return
	}
	// A longer sync.lookback than the one a watermark was published under
	// lowers it by as much (docs/reliability.md): configured since (a read
	// of it starts that much lower), or the one a debt committed since was
	// reckoned under (a backfill of the old configuration, a run planned
	// before it was lowered: a mark of it that wins the merge keeps its
	// debt). widest is the longest of those (runShard, simStore.Commit).
	for _, wm := range w.watermarks[:p.startPubs] {
		slack := wm.widest - wm.lookback
		for _, r := range rows {
			if wm.holders[r.VariableID] && r.TsMs < wm.ms-slack {
				w.violate("%s loaded %s@%+d, stamped before the watermark %+d published before it began", p.name, r.VariableID, r.TsMs-simStart, wm.ms-simStart)
				return
			}
			if v, ok := wm.each[r.VariableID]; ok && r.TsMs < v-slack {
				w.violate("%s loaded %s@%+d, stamped before %+d, where that variable's reads started at the earliest when a watermark was published before it began", p.name, r.VariableID, r.TsMs-simStart, v-simStart)
				return
			}
		}
	}
}
