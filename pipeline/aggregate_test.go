package pipeline

import (
	"context"
	"math"
	"slices"
	"testing"
	"unsafe"
)

// referenceHours aggregates pts per hour the plain way, independently of
// aggregate.go: what datapoints_hourly must hold for them.
func referenceHours(pts []Point) []HourAgg {
	byHour := map[int64][]Point{}
	for _, p := range pts {
		h := p.TsMs / 3600000 * 3600000
		byHour[h] = append(byHour[h], p)
	}
	var out []HourAgg
	for h, ps := range byHour {
		slices.SortFunc(ps, func(a, b Point) int { return int(a.TsMs - b.TsMs) })
		a := HourAgg{Hour: int32(h / 3600000), Count: uint32(len(ps)), Min: math.Inf(1), Max: math.Inf(-1),
			FirstValue: ps[0].Value, LastValue: ps[len(ps)-1].Value, FirstMs: uint32(ps[0].TsMs - h), LastMs: uint32(ps[len(ps)-1].TsMs - h)}
		for _, p := range ps {
			a.Sum += p.Value
			a.Min, a.Max = math.Min(a.Min, p.Value), math.Max(a.Max, p.Value)
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b HourAgg) int { return int(a.Hour - b.Hour) })
	return out
}

// The engine hands the rollup, for every variable whose rows it loaded
// once each, their aggregates; they equal the plain per-hour aggregates of
// the source's points, and the latest row is the newest point. Where it
// gives none (a frame cut and read again may load a point twice), the
// rollup recomputes, so only a wrong aggregate is an error.
func TestEngineHandsTheRollupTheAggregatesOfWhatItLoaded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     EngineOptions
		wantAggs bool
	}{
		{"frames whole", EngineOptions{RowsPerRequest: 10000, VariablesPerRequest: 3, BatchRows: 500}, true},
		{"frames cut, chunks of one frame", EngineOptions{RowsPerRequest: 97, VariablesPerRequest: 2, BatchRows: 50}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 5000 points 1 s apart: two hours of each variable's points
			// straddle an hour boundary.
			src, targets := fixture(5, 5000, 1_700_000_000_000)
			// A mark below the window: the table may hold the variable's
			// older rows, so its aggregates are not First.
			targets[1].HasMark, targets[1].Mark = true, Mark{HwmMs: targets[1].Start - 1}
			w := &memWriter{rows: map[string]map[int64]Row{}}
			st := &memStore{marks: map[string]Mark{}}
			ru := &memRollup{st: st, touched: map[string]Touched{}}
			tc.opts.Rollup = ru
			res := NewEngine(src, w, st, tc.opts, nil, nil, nil).Run(context.Background(), targets)
			if len(res.Failed) != 0 || res.CommitErr != nil {
				t.Fatalf("failed=%v commit=%v", res.Failed, res.CommitErr)
			}
			withAgg := 0
			for _, tg := range targets {
				pts := src.points[tg.Variable.ID]
				got := ru.touched[tg.Variable.ID]
				if got.Agg == nil {
					continue
				}
				withAgg++
				if want := referenceHours(pts); !slices.Equal(got.Agg.Hours, want) {
					t.Errorf("%s: hours\n got %+v\nwant %+v", tg.Variable.ID, got.Agg.Hours, want)
				}
				newest := pts[len(pts)-1]
				if l := got.Agg.Latest; l.TsMs != newest.TsMs || l.Value != newest.Value || l.Context != string(newest.Context) || l.VariableID != tg.Variable.ID || l.DeviceLabel != "dev" {
					t.Errorf("%s: latest %+v, want the newest point %+v", tg.Variable.ID, l, newest)
				}
				if got.Agg.First == tg.HasMark {
					t.Errorf("%s: First is %v with a mark %v, want it only without one", tg.Variable.ID, got.Agg.First, tg.HasMark)
				}
				if got.Agg.Rows != int64(len(pts)) {
					t.Errorf("%s: %d rows aggregated, want %d", tg.Variable.ID, got.Agg.Rows, len(pts))
				}
			}
			if tc.wantAggs && withAgg != len(targets) {
				t.Errorf("aggregates for %d of %d variables, want all: each point was loaded once", withAgg, len(targets))
			}
			t.Logf("aggregates for %d of %d variables", withAgg, len(targets))
		})
	}
}

func TestAggregatesAreRefusedWhereTheyCouldBeWrong(t *testing.T) {
	rows := func(ts []int64, vals ...float64) *Batch {
		var b Batch
		for i, t := range ts {
			v := float64(i)
			if i < len(vals) {
				v = vals[i]
			}
			b.Append(Row{VariableID: "v", TsMs: t, Value: v, Context: "{}"})
		}
		b.Spans = []Span{{VariableID: "v", Rows: len(ts), MinTsMs: slices.Min(ts), MaxTsMs: slices.Max(ts)}}
		return &b
	}
	agg := func(bs ...*Batch) *Aggregates {
		var spans []*spanAgg
		var n int64
		for _, b := range bs {
			aggregateSpans(b)
			spans = append(spans, b.Spans[0].agg)
			n += int64(b.Len())
		}
		return aggregatesOf(spans, n)
	}
	h := int64(3600_000)
	for _, tc := range []struct {
		name string
		got  *Aggregates
		ok   bool
	}{
		{"ascending", agg(rows([]int64{h, h + 1, 2*h + 5})), true},
		{"descending, two spans", agg(rows([]int64{3 * h, 2*h + 1}), rows([]int64{2 * h, h})), true},
		{"a timestamp twice in a span", agg(rows([]int64{h, h + 1, h + 1})), false},
		{"out of order", agg(rows([]int64{h, h + 2, h + 1})), false},
		{"spans overlapping", agg(rows([]int64{h, h + 10}), rows([]int64{h + 5, h + 20})), false},
		{"spans sharing an edge", agg(rows([]int64{h, h + 10}), rows([]int64{h + 10, h + 20})), false},
		{"NaN", agg(rows([]int64{h, h + 1}, 1, math.NaN())), false},
		{"+Inf", agg(rows([]int64{h, h + 1}, math.Inf(1), 1)), false},
		{"before 1970", agg(rows([]int64{-5, 1})), false},
		{"rows not all aggregated", aggregatesOf([]*spanAgg{aggregateRows(rows([]int64{h}), 0, 1)}, 2), false},
	} {
		if (tc.got != nil) != tc.ok {
			t.Errorf("%s: aggregates %+v, want them given: %v", tc.name, tc.got, tc.ok)
		}
	}
	// Two spans of one hour merge into one row, first and last by time.
	a := agg(rows([]int64{h + 30, h + 20}, 3, 4), rows([]int64{h + 10, h}, 5, 6))
	want := []HourAgg{{Hour: 1, Count: 4, Sum: 18, Min: 3, Max: 6, FirstValue: 6, LastValue: 3, FirstMs: 0, LastMs: 30}}
	if a == nil || !slices.Equal(a.Hours, want) || a.Latest.TsMs != h+30 || a.Latest.Value != 3 {
		t.Errorf("merged %+v, want %+v and the latest at %d", a, want, h+30)
	}
	// Descending spans given newest first come out in ascending hours, the
	// hour both touch merged.
	a = agg(rows([]int64{3 * h, 2*h + 1}, 1, 2), rows([]int64{2 * h, h}, 3, 4))
	want = []HourAgg{
		{Hour: 1, Count: 1, Sum: 4, Min: 4, Max: 4, FirstValue: 4, LastValue: 4, FirstMs: 0, LastMs: 0},
		{Hour: 2, Count: 2, Sum: 5, Min: 2, Max: 3, FirstValue: 3, LastValue: 2, FirstMs: 0, LastMs: 1},
		{Hour: 3, Count: 1, Sum: 1, Min: 1, Max: 1, FirstValue: 1, LastValue: 1, FirstMs: 0, LastMs: 0},
	}
	if a == nil || !slices.Equal(a.Hours, want) || a.Rows != 4 || a.Latest.TsMs != 3*h {
		t.Errorf("joined %+v, want %+v", a, want)
	}
}

// A backfill holds an HourAgg for every hour of every row not yet
// committed: its size is part of the peak RSS a backfill is held to.
func TestHourAggStaysSmall(t *testing.T) {
	if n := unsafe.Sizeof(HourAgg{}); n != 56 {
		t.Errorf("HourAgg is %d bytes, want 56", n)
	}
}
