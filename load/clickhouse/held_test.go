package clickhouse

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fleetsync/fleetsync/pipeline"
)

// heldRow is one row for a held test: variable, device, time, value.
type heldRow struct {
	id, device string
	ms         int64
	v          float64
}

func heldBatch(rows ...heldRow) *pipeline.Batch {
	var b pipeline.Batch
	for _, r := range rows {
		b.Append(pipeline.Row{VariableID: r.id, DeviceID: r.device, DeviceLabel: "dl", VariableLabel: "vl", TsMs: r.ms, Value: r.v, Context: "{}"})
	}
	return &b
}

// series is n rows of id, step ms apart from start, ascending or not.
func series(id string, start, step int64, n int, up bool, value func(i int) float64) []heldRow {
	out := make([]heldRow, n)
	for i := range n {
		out[i] = heldRow{id: id, device: "d-" + id, ms: start + int64(i)*step, v: value(i)}
	}
	if !up {
		slices.Reverse(out)
	}
	return out
}

// foldAcked folds each batch as one INSERT of its own version, acknowledged.
func foldAcked(h *held, batches ...*pipeline.Batch) {
	for i, b := range batches {
		v := uint64(100 + i)
		h.end(v, true, h.fold(b, v, nil, nil))
	}
}

func newHeld() *held {
	h := &held{}
	h.on.Store(true)
	return h
}

// The cells a record adds up to are what GROUP BY toStartOfHour(ts) over
// the rows computes, whatever the order and the cuts of the runs.
func TestHeldRecordsAddUpToTheHoursOfTheirRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 50 {
		h := newHeld()
		start := base0 + int64(rng.IntN(1000))
		n := 1 + rng.IntN(3000)
		step := 1 + int64(rng.IntN(20000))
		rows := series("v", start, step, n, true, func(int) float64 { return math.Round(rng.NormFloat64()*1e6) / 1e3 })
		// Cut into runs sent by INSERTs in random order, each run in
		// either direction, as frames of the service come.
		var bs []*pipeline.Batch
		for i := 0; i < n; {
			j := min(n, i+1+rng.IntN(500))
			run := slices.Clone(rows[i:j])
			if rng.IntN(2) == 0 {
				slices.Reverse(run)
			}
			bs = append(bs, heldBatch(run...))
			i = j
		}
		rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		foldAcked(h, bs...)
		r := h.take([]string{"v"})["v"]
		if r == nil {
			t.Fatalf("round %d: no record of %d rows in %d runs", round, n, len(bs))
		}
		want := map[int64]*cell{}
		var newest heldRow
		for _, x := range rows {
			hr := hourStart(x.ms)
			c := want[hr]
			if c == nil {
				c = &cell{hour: int32(hr / hourMs), count: 0, firstMs: math.MaxUint32, min: math.Inf(1), max: math.Inf(-1)}
				want[hr] = c
			}
			in := uint32(x.ms - hr)
			c.count++
			c.sum += x.v
			c.min, c.max = min(c.min, x.v), max(c.max, x.v)
			if in < c.firstMs {
				c.firstMs, c.first = in, x.v
			}
			if in >= c.lastMs {
				c.lastMs, c.last = in, x.v
			}
			if x.ms > newest.ms {
				newest = x
			}
		}
		got := r.hours()
		if len(got) != len(want) {
			t.Fatalf("round %d: %d hours, want %d", round, len(got), len(want))
		}
		for _, c := range got {
			w := want[c.startMs()]
			if w == nil || c.count != w.count || c.min != w.min || c.max != w.max || c.first != w.first || c.last != w.last ||
				c.firstMs != w.firstMs || c.lastMs != w.lastMs || math.Abs(c.sum-w.sum) > 1e-9*math.Abs(w.sum)+1e-9 {
				t.Fatalf("round %d: hour %d is %+v, want %+v", round, c.startMs(), c, w)
			}
		}
		if r.latest.TsMs != newest.ms || r.latest.Value != newest.v || r.latest.DeviceID != "d-v" {
			t.Errorf("round %d: newest row %+v, want %+v", round, r.latest, newest)
		}
		var rowsOf int64
		for _, v := range r.versions {
			rowsOf += v.rows
		}
		if rowsOf != int64(n) || len(r.versions) != len(bs) {
			t.Errorf("round %d: versions %+v, want %d rows in %d versions", round, r.versions, n, len(bs))
		}
	}
}

// base0 is a time inside DateTime's range, in ms.
const base0 = int64(1_700_000_000_000)

// A record that cannot prove its rows exactly is not handed out: its
// variable is recomputed from FINAL. Each case fails the fold of a clean
// record in one way.
func TestHeldRecordsThatCannotProveTheirRowsAreNotTaken(t *testing.T) {
	up := func(id string, start int64, n int) []heldRow {
		return series(id, start, 1000, n, true, func(i int) float64 { return float64(i) })
	}
	cases := map[string]func(h *held){
		"a run read again (a cut frame's rows)": func(h *held) {
			foldAcked(h, heldBatch(up("v", base0, 10)...), heldBatch(up("v", base0+5000, 10)...))
		},
		"a run holding a time twice": func(h *held) {
			rows := up("v", base0, 10)
			rows[4].ms = rows[3].ms
			foldAcked(h, heldBatch(rows...))
		},
		"a run that turns back": func(h *held) {
			rows := up("v", base0, 10)
			rows[5], rows[6] = rows[6], rows[5]
			foldAcked(h, heldBatch(rows...))
		},
		"a NaN": func(h *held) {
			rows := up("v", base0, 10)
			rows[3].v = math.NaN()
			foldAcked(h, heldBatch(rows...))
		},
		"an infinity": func(h *held) {
			rows := up("v", base0, 10)
			rows[3].v = math.Inf(-1)
			foldAcked(h, heldBatch(rows...))
		},
		"a value whose sums could overflow": func(h *held) {
			rows := up("v", base0, 10)
			rows[3].v = -1e301
			foldAcked(h, heldBatch(rows...))
		},
		"a negative zero": func(h *held) {
			rows := up("v", base0, 10)
			rows[3].v = math.Copysign(0, -1)
			foldAcked(h, heldBatch(rows...))
		},
		"a time before 1970": func(h *held) { foldAcked(h, heldBatch(up("v", -5000, 10)...)) },
		"a time past DateTime": func(h *held) {
			foldAcked(h, heldBatch(up("v", (1<<32)*1000-3000, 10)...))
		},
		"two devices": func(h *held) {
			rows := up("v", base0, 10)
			rows[7].device = "other"
			foldAcked(h, heldBatch(rows...))
		},
		"an INSERT not acknowledged": func(h *held) {
			foldAcked(h, heldBatch(up("v", base0, 10)...))
			h.fold(heldBatch(up("v", base0+hourMs, 10)...), 999, nil, nil)
		},
		"more runs than it keeps": func(h *held) {
			var bs []*pipeline.Batch
			for i := range maxRuns + 1 {
				bs = append(bs, heldBatch(up("v", base0+int64(i)*hourMs, 2)...))
			}
			foldAcked(h, bs...)
		},
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHeld()
			spoil(h)
			if r := h.take([]string{"v"}); len(r) != 0 {
				t.Errorf("record taken: %+v", r["v"].versions)
			}
			if h.bytes != 0 {
				t.Errorf("%d bytes held once the record was taken", h.bytes)
			}
		})
	}
	t.Run("control: INSERTs of disjoint runs, in any order, interleaved", func(t *testing.T) {
		h := newHeld()
		foldAcked(h, heldBatch(up("v", base0+hourMs, 10)...), heldBatch(series("v", base0, 1000, 10, false, func(int) float64 { return 1 })...))
		a, b := up("v", base0+3*hourMs, 30), up("v", base0+5*hourMs, 30)
		ra := h.fold(heldBatch(a[:10]...), 1, nil, nil)
		rb := h.fold(heldBatch(b...), 2, nil, nil)
		ra = h.fold(heldBatch(a[10:]...), 1, nil, ra)
		h.end(1, true, ra)
		h.end(2, true, rb)
		r := h.take([]string{"v"})["v"]
		if r == nil || len(r.versions) != 4 || len(r.runs) != 5 || r.rows() != 80 {
			t.Fatalf("record %+v", r)
		}
	})
}

// A version whose rows a record may have missed spoils every record that
// meets it until its INSERT ends: one whose record was taken while it was
// open, and one that found no room for a record.
func TestHeldTaintsTheVersionsARecordMayHaveMissed(t *testing.T) {
	rows := func(id string, from int64) *pipeline.Batch {
		return heldBatch(series(id, base0+from*hourMs, 1000, 10, true, func(int) float64 { return 1 })...)
	}
	t.Run("taken while open", func(t *testing.T) {
		h := newHeld()
		recs := h.fold(rows("v", 0), 7, nil, nil)
		if got := h.take([]string{"v"}); len(got) != 0 {
			t.Fatal("a record with an INSERT open was taken")
		}
		// The INSERT goes on: v's new record lacks the rows sent before.
		recs = h.fold(rows("v", 1), 7, nil, recs)
		h.end(7, true, recs)
		if got := h.take([]string{"v"}); len(got) != 0 {
			t.Error("a record missing rows of its version was taken")
		}
		// Once it ended, a new INSERT's rows make a record again.
		h.end(8, true, h.fold(rows("v", 2), 8, nil, nil))
		if got := h.take([]string{"v"}); got["v"] == nil || got["v"].rows() != 10 {
			t.Errorf("after the INSERT ended: %+v", got)
		}
	})
	t.Run("no room", func(t *testing.T) {
		h := newHeld()
		h.bytes = maxHeldBytes // as if full
		recs := h.fold(rows("v", 0), 7, nil, nil)
		h.bytes = 0 // another variable's record was taken
		recs = h.fold(rows("v", 1), 7, nil, recs)
		h.end(7, true, recs)
		if got := h.take([]string{"v"}); len(got) != 0 {
			t.Error("a record missing rows of its version was taken")
		}
	})
}

// The records never hold more than maxHeldBytes: the variables beyond it
// are recomputed, and taking every record frees all.
func TestHeldRecordsStayWithinTheirBound(t *testing.T) {
	h := newHeld()
	var ids []string
	for v := range 1000 {
		id := fmt.Sprint("v", v)
		ids = append(ids, id)
		// 30 days of one point an hour: 720 cells, 40 MB for them all.
		foldAcked(h, heldBatch(series(id, base0, hourMs, 720, v%2 == 0, func(i int) float64 { return float64(i) })...))
		if h.bytes > maxHeldBytes {
			t.Fatalf("%d bytes held after %d variables, bound %d", h.bytes, v+1, maxHeldBytes)
		}
	}
	got := h.take(ids)
	if len(got) == 0 || len(got) == len(ids) {
		t.Errorf("%d of %d records kept: the bound should keep some and leave out others", len(got), len(ids))
	}
	if h.bytes != 0 || len(h.vars) != 0 {
		t.Errorf("%d bytes and %d records left after taking them all", h.bytes, len(h.vars))
	}
}

// Without the hook nothing is folded: a process without the analyst
// tables keeps no records.
func TestHeldFoldsNothingUntilTheHookIsTaken(t *testing.T) {
	h := &held{}
	foldAcked(h, heldBatch(series("v", base0, 1000, 10, true, func(int) float64 { return 1 })...))
	if len(h.vars) != 0 || h.bytes != 0 {
		t.Errorf("%d records, %d bytes", len(h.vars), h.bytes)
	}
}

// base0h is the start of the hour-th hour after base0's.
func base0h(hour int64) int64 { return hourStart(base0) + hour*hourMs }

// A record spoiled while an INSERT is open still taints that INSERT's
// version when it is taken: else the INSERT's later rows would start a
// record lacking the earlier ones, whose counts a merge could make agree
// with the table's.
func TestHeldTakingASpoiledRecordTaintsItsOpenVersions(t *testing.T) {
	one := func(int) float64 { return 1 }
	h := newHeld()
	s := series("x", base0h(2), 1000, 10, true, one)
	s[5], s[6] = s[6], s[5] // turns back: spoils the record
	recs := h.fold(heldBatch(s...), 7, nil, nil)
	h.take([]string{"x"}) // another pass's Recompute, INSERT 7 still open
	c := series("x", base0h(2)+100_000, 1000, 10, true, one)
	d := series("x", base0h(3), 1000, 10, true, one)
	for _, rows := range [][]heldRow{c, d} {
		recs = h.fold(heldBatch(rows...), 7, nil, recs)
	}
	h.end(7, true, recs)
	if r := h.take([]string{"x"})["x"]; r != nil {
		t.Errorf("record of x taken with %+v; INSERT 7 sent it 30 rows", r.versions)
	}

	// The same when a tainted version spoils a record holding another
	// open one.
	h = newHeld()
	recsA := h.fold(heldBatch(series("x", base0h(0), 1000, 10, true, one)...), 1, nil, nil)
	recsB := h.fold(heldBatch(series("y", base0h(0), 1000, 10, true, one)...), 2, nil, nil)
	h.take([]string{"y"}) // taints 2
	recsB = h.fold(heldBatch(series("x", base0h(1), 1000, 10, true, one)...), 2, nil, recsB)
	h.take([]string{"x"}) // spoiled by 2; must taint 1
	recsA = h.fold(heldBatch(series("x", base0h(5), 1000, 10, true, one)...), 1, nil, recsA)
	h.end(1, true, recsA)
	h.end(2, true, recsB)
	if r := h.take([]string{"x"})["x"]; r != nil {
		t.Errorf("record of x taken with %+v; INSERT 1 sent it 20 rows", r.versions)
	}
}

// A failed INSERT's version is not tainted once it ended: the taints last
// only while INSERTs are open.
func TestHeldTaintsEndWithTheirInserts(t *testing.T) {
	h := newHeld()
	for i := range 1000 {
		v := uint64(1000 + i)
		recs := h.fold(heldBatch(series("x", base0h(int64(i)), 1000, 2, true, func(int) float64 { return 1 })...), v, nil, nil)
		h.end(v, false, recs) // Commit failed, or Abort
		h.take([]string{"x"})
	}
	if len(h.tainted) != 0 {
		t.Errorf("%d versions tainted after every INSERT ended", len(h.tainted))
	}
}
