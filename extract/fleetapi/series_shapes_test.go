package fleetapi

import (
	"testing"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// The shapes fleetsim serves behind the memory benchmark's flags: contexts
// padded to several times their size, and `results` before `columns`. The
// client reads each to the same points, contexts byte for byte as the
// oracle has them.
func TestSeriesReadsPaddedContextsAndResultsBeforeColumns(t *testing.T) {
	for _, c := range []struct {
		name string
		opts fleetsim.Options
	}{
		{"--context-bytes 300", fleetsim.Options{ContextBytes: 300}},
		{"--results-first", fleetsim.Options{ResultsFirst: true}},
		{"both", fleetsim.Options{ContextBytes: 300, ResultsFirst: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newConf(t, c.opts)
			var ids []string
			for _, v := range e.variables("") {
				ids = append(ids, v.ID)
			}
			lo, hi := e.window()
			for _, joined := range []bool{false, true} {
				rec := seriesOf(t, e.ordinary(), joined, SeriesRequest{VariableIDs: ids, Start: lo, End: hi})
				padded := 0
				for i, id := range ids {
					samePoints(t, "frame of "+id, rec.frames[i], e.pointsIn(id, lo, hi))
					for _, p := range rec.frames[i] {
						if len(p.ctx) == c.opts.ContextBytes {
							padded++
						}
					}
				}
				if c.opts.ContextBytes > 0 && padded == 0 {
					t.Errorf("joined %v: no context of %d bytes read", joined, c.opts.ContextBytes)
				}
			}
		})
	}
}
