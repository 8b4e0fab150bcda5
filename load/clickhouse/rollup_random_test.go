package clickhouse_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/load/clickhouse/rolluptest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// stream loads rows through one streamed INSERT of c, cut into chunks of
// at most chunk rows; when chunk is a multiple of 3, through one Write of
// those chunks instead, the writer's other way in.
func stream(t *testing.T, c *clickhouse.Client, rows []pipeline.Row, chunk int) {
	t.Helper()
	if chunk%3 == 0 {
		var chunks []*pipeline.Batch
		for i := 0; i < len(rows); i += chunk {
			var b pipeline.Batch
			for _, r := range rows[i:min(len(rows), i+chunk)] {
				b.Append(r)
			}
			chunks = append(chunks, &b)
		}
		if err := c.Write(context.Background(), chunks); err != nil {
			t.Fatal(err)
		}
		return
	}
	in, err := c.Points().Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for len(rows) > 0 {
		var b pipeline.Batch
		n := min(chunk, len(rows))
		for _, r := range rows[:n] {
			b.Append(r)
		}
		rows = rows[n:]
		if err := in.Append(&b); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestAStreamedBackfillsRollupsAreWhatFinalHolds: a first load of every
// variable through two streamed INSERTs, newest first as the service
// answers, recomputed in statements side by side (hourlyStreams).
func TestAStreamedBackfillsRollupsAreWhatFinalHolds(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	var rows []pipeline.Row
	var touched []analyst.Range
	for v := range 20 {
		id := fmt.Sprint("v", v)
		n := 500 + v*37
		for i := range n {
			// Newest first, as the service answers; about 6 days.
			ts := base + int64(n-i)*1000*1000 + int64(v)
			r := pipeline.Row{VariableID: id, DeviceID: "d" + strconv.Itoa(v%3), DeviceLabel: "dev", VariableLabel: "x", TsMs: ts, Value: math.Sin(float64(i)) * 100, Context: "{}"}
			if i%3 == 0 {
				r.Lat, r.Lng, r.HasLat, r.HasLng = 1.25, -2.5, true, true
				r.Context = `{"lat":1.25,"lng":-2.5}`
			}
			rows = append(rows, r)
		}
		touched = append(touched, analyst.Range{VariableID: id, FromMs: math.MinInt64, ToMs: base + int64(n)*1000*1000 + int64(v), Loaded: true})
	}
	stream(t, c, rows[:len(rows)/2], 777)
	stream(t, c, rows[len(rows)/2:], 1000)
	recompute(t, c, touched)
	if h, l := rolluptest.Check(t, c); h < 20*100 || l != 20 {
		t.Errorf("compared %d hourly and %d latest rows", h, l)
	}
	if handed := c.RollupCount(t); handed != 20 {
		t.Errorf("%v variables handed, want 20", handed)
	}
}

// TestRollupsAreWhatFinalHoldsWhateverTheWritersDid runs random
// histories of two writers over a few variables: streamed INSERTs cut at
// random, in either time order, re-reading what they loaded before, some
// failing after part of their rows were sent, two open at once across a
// recompute; another writer changing values of the same points and adding
// its own (with its own hook); merges at random moments. Whenever every
// writer has handed what it loaded to its hook, both tables must be what
// FINAL holds. FLEETSYNC_ROLLUP_SEEDS sets the number of histories (default 12).
func TestRollupsAreWhatFinalHoldsWhateverTheWritersDid(t *testing.T) {
	seeds := 12
	if s, err := strconv.Atoi(os.Getenv("FLEETSYNC_ROLLUP_SEEDS")); err == nil {
		seeds = s
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			h := newHistory(t, uint64(seed))
			for range 25 {
				h.step()
			}
			h.settle()
		})
	}
}

type history struct {
	t       *testing.T
	rng     *rand.Rand
	a, b    *clickhouse.Client
	vars    []string
	touched map[*clickhouse.Client]map[string]analyst.Range
	loaded  bool // datapoints has rows: Check compares nothing otherwise
	// since is what a loaded since its hook last ran.
	since []pipeline.Row
	made  int // variables made for one step
}

func newHistory(t *testing.T, seed uint64) *history {
	a := clickhouse.OpenTestClientOn(t, "")
	b := clickhouse.OpenTestClientOn(t, a.Database())
	return &history{t: t, rng: rand.New(rand.NewPCG(seed, 0x5eed)), a: a, b: b,
		vars:    []string{"v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9"},
		touched: map[*clickhouse.Client]map[string]analyst.Range{a: {}, b: {}}}
}

// rows makes n points of id: on a grid of 7-minute steps over about a day
// (so re-reads and the other writer meet the same points), distinct
// timestamps, in either order, values depending on salt.
func (h *history) rows(id string, n int, salt float64) []pipeline.Row {
	at := h.rng.IntN(200)
	var out []pipeline.Row
	for i := range n {
		at += 1 + h.rng.IntN(2)
		ts := base + int64(at)*7*60*1000
		out = append(out, pipeline.Row{VariableID: id, DeviceID: "d-" + id, DeviceLabel: "dev", VariableLabel: id,
			TsMs: ts, Value: float64(i) + salt, Context: "{}"})
	}
	if h.rng.IntN(2) == 0 {
		slices.Reverse(out)
	}
	return out
}

// note records what c loaded (or may have) for the hook.
func (h *history) note(c *clickhouse.Client, rows []pipeline.Row, acked bool) {
	for _, r := range rows {
		t, ok := h.touched[c][r.VariableID]
		if !ok {
			t = analyst.Range{VariableID: r.VariableID, FromMs: r.TsMs, ToMs: r.TsMs, Loaded: true}
		}
		t.FromMs, t.ToMs = min(t.FromMs, r.TsMs), max(t.ToMs, r.TsMs)
		if !acked {
			// Some rows landed, maybe not the newest: the hook is told so.
			t.Loaded = false
		}
		h.touched[c][r.VariableID] = t
		h.loaded = true
	}
}

// hook hands c's hook what c loaded since its last call.
func (h *history) hook(c *clickhouse.Client) {
	var ts []analyst.Range
	for _, t := range h.touched[c] {
		if h.rng.IntN(3) != 0 {
			t.FromMs = math.MinInt64 // a first sync: no mark
		}
		ts = append(ts, t)
	}
	clear(h.touched[c])
	if c == h.a {
		h.since = nil
	}
	h.t.Logf("hook %s %+v", c.Database(), ts)
	if err := c.AnalystTables().Recompute(context.Background(), ts); err != nil {
		h.t.Fatal(err)
	}
}

// load streams rows of a few variables through one INSERT of c, which
// fails (Abort after some chunks were sent) with probability fail.
func (h *history) load(c *clickhouse.Client, salt float64, fail bool) {
	var rows []pipeline.Row
	for _, id := range h.vars {
		if h.rng.IntN(3) == 0 {
			rows = append(rows, h.rows(id, 1+h.rng.IntN(40), salt)...)
		}
	}
	if c == h.a && len(h.since) > 0 && h.rng.IntN(3) == 0 {
		// A re-read of points a loaded since its hook, as a cut frame's
		// rows are read again: the same keys in another INSERT of a (one
		// INSERT holding a key twice leaves FINAL's pick arbitrary).
		i := h.rng.IntN(len(h.since))
		again := slices.Clone(h.since[i:min(len(h.since), i+1+h.rng.IntN(20))])
		stream(h.t, c, again, 1+h.rng.IntN(30))
		h.note(c, again, true)
	}
	if len(rows) == 0 {
		return
	}
	in, err := c.Points().Begin(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	sent := h.sendSome(in, rows, fail)
	if fail {
		// The rows sent may land, even after Abort returned: the engine
		// reads them again (their marks did not move), and so does this.
		in.Abort()
		if len(sent) > 0 {
			stream(h.t, c, sent, 1+h.rng.IntN(30))
		}
		h.note(c, sent, true)
		return
	}
	if err := in.Commit(); err != nil {
		h.t.Fatal(err)
	}
	h.note(c, rows, true)
	if c == h.a {
		h.since = append(h.since, rows...)
	}
}

// sendSome appends rows in random chunks; when part, only a prefix of
// them. It returns what was appended.
func (h *history) sendSome(in pipeline.Insert, rows []pipeline.Row, part bool) []pipeline.Row {
	n := len(rows)
	if part {
		n = h.rng.IntN(len(rows) + 1)
	}
	for i := 0; i < n; {
		j := min(n, i+1+h.rng.IntN(30))
		var b pipeline.Batch
		for _, r := range rows[i:j] {
			b.Append(r)
		}
		if err := in.Append(&b); err != nil {
			h.t.Fatal(err)
		}
		i = j
	}
	return rows[:n]
}

func (h *history) step() {
	k := h.rng.IntN(12)
	h.t.Logf("step %d", k)
	switch {
	case k == 11:
		h.fresh()
	case k < 4:
		h.load(h.a, 0, h.rng.IntN(8) == 0)
	case k < 5:
		h.load(h.b, 1000+float64(h.rng.IntN(9)), h.rng.IntN(8) == 0)
		if h.rng.IntN(2) == 0 {
			h.hook(h.b)
		}
	case k < 6:
		// Two INSERTs of a open at once, a recompute of a between them.
		r1 := h.rows(h.vars[h.rng.IntN(len(h.vars))], 20, 0.5)
		r2 := h.rows(h.vars[h.rng.IntN(len(h.vars))], 20, 0.25)
		i1, err := h.a.Points().Begin(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		i2, err := h.a.Points().Begin(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		h.sendSome(i1, r1[:len(r1)/2], false)
		h.sendSome(i2, r2[:len(r2)/2], false)
		h.note(h.a, append(r1[:len(r1)/2:len(r1)/2], r2[:len(r2)/2]...), false)
		h.hook(h.a)
		h.sendSome(i2, r2[len(r2)/2:], false)
		h.sendSome(i1, r1[len(r1)/2:], false)
		for _, in := range []pipeline.Insert{i2, i1} {
			if err := in.Commit(); err != nil {
				h.t.Fatal(err)
			}
		}
		h.note(h.a, append(r1, r2...), true)
	case k < 7:
		h.optimize()
	case k < 8 && len(h.since) > 0:
		// Another writer rewrites some of the very points a loaded, with
		// other values, and a merge may keep either.
		var rows []pipeline.Row
		for _, r := range h.since {
			if h.rng.IntN(2) == 0 {
				r.Value += 500
				rows = append(rows, r)
			}
		}
		if len(rows) > 0 {
			stream(h.t, h.b, rows, 1+h.rng.IntN(30))
			h.note(h.b, rows, true)
		}
		if h.rng.IntN(2) == 0 {
			h.optimize()
		}
	case k < 8 && h.rng.IntN(2) == 0:
		h.straddle()
	case k < 8:
		h.reread()
	case k < 10:
		h.hook(h.a)
	default:
		h.settle()
	}
}

func (h *history) optimize() {
	if err := h.a.Conn().Exec(context.Background(), "OPTIMIZE TABLE "+h.a.Table(clickhouse.TableDatapoints)+" FINAL"); err != nil {
		h.t.Fatal(err)
	}
}

// straddle runs two INSERTs of a across a recompute of a, both with the
// same points of one variable: the later one (greater version) sends the
// first half of them before the recompute and the rest after, the earlier
// one the first half with other values after it. Once merged, the table
// holds exactly as many rows as a loaded after the recompute, all of a's
// versions, but the first half's values are the later INSERT's.
func (h *history) straddle() {
	// A variable of its own.
	h.made++
	id := fmt.Sprint("s", h.made)
	rows := h.rows(id, 2+h.rng.IntN(30), 0.75)
	half := len(rows) / 2
	early, err := h.a.Points().Begin(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	late, err := h.a.Points().Begin(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	h.sendSome(late, rows[:half], false)
	h.note(h.a, rows[:half], false)
	h.hook(h.a)
	other := slices.Clone(rows[:half])
	for i := range other {
		other[i].Value -= 250
	}
	h.sendSome(early, other, false)
	h.sendSome(late, rows[half:], false)
	for _, in := range []pipeline.Insert{early, late} {
		if err := in.Commit(); err != nil {
			h.t.Fatal(err)
		}
	}
	h.note(h.a, rows, true)
	h.since = append(h.since, rows...)
	h.optimize()
}

// reread loads a new variable's points, then some of them again in
// another INSERT (as a cut frame's rows are read twice), and hands them to
// the hook as a first load: until a merge the table holds those points
// twice, all of a's versions.
func (h *history) reread() {
	h.made++
	rows := h.rows(fmt.Sprint("r", h.made), 2+h.rng.IntN(30), 0)
	i := h.rng.IntN(len(rows))
	again := slices.Clone(rows[i:min(len(rows), i+1+h.rng.IntN(10))])
	stream(h.t, h.a, rows, 1+h.rng.IntN(30))
	stream(h.t, h.a, again, 1+h.rng.IntN(30))
	h.note(h.a, rows, true)
	h.since = append(h.since, rows...)
	h.hook(h.a)
}

// fresh loads a new variable through a, in one to three INSERTs of
// disjoint runs in any order, and hands it to a's hook. b may write some
// of the same points with other values, before a (a smaller version, which
// a merge drops) or after it (a greater one, which a merge keeps), and a
// merge may follow.
func (h *history) fresh() {
	h.made++
	rows := h.rows(fmt.Sprint("f", h.made), 2+h.rng.IntN(60), 0.125)
	var other []pipeline.Row
	for _, r := range rows {
		if h.rng.IntN(3) == 0 {
			r.Value += 500
			other = append(other, r)
		}
	}
	when := h.rng.IntN(4) // 0: b first, 1: b after, else: b not at all
	if when == 0 && len(other) > 0 {
		stream(h.t, h.b, other, 1+h.rng.IntN(30))
		h.note(h.b, other, true)
	}
	parts := [][]pipeline.Row{rows}
	if n := h.rng.IntN(3); n > 0 && len(rows) > 2 {
		cut := 1 + h.rng.IntN(len(rows)-1)
		parts = [][]pipeline.Row{rows[:cut], rows[cut:]}
		if n == 2 {
			parts[0], parts[1] = parts[1], parts[0]
		}
	}
	for _, p := range parts {
		stream(h.t, h.a, p, 1+h.rng.IntN(30))
	}
	h.note(h.a, rows, true)
	h.since = append(h.since, rows...)
	if when == 1 && len(other) > 0 {
		stream(h.t, h.b, other, 1+h.rng.IntN(30))
		h.note(h.b, other, true)
	}
	if h.rng.IntN(2) == 0 {
		h.optimize()
	}
	h.hook(h.a)
}

// settle hands both writers' loads to their hooks and checks the tables.
func (h *history) settle() {
	h.t.Helper()
	h.hook(h.b)
	h.hook(h.a)
	if h.loaded {
		rolluptest.Check(h.t, h.a)
	}
}

// TestARecomputeOfThousandsOfVariablesIsExact: a commit of thousands of
// variables (a first sync of 10^5 variables commits 20,000 at a time) is
// cut into statements ClickHouse accepts (max_query_size is 256 KiB).
func TestARecomputeOfThousandsOfVariablesIsExact(t *testing.T) {
	c := clickhouse.OpenTestClient(t)
	const vars = 7000
	var first, second []pipeline.Row
	var touched []analyst.Range
	for v := range vars {
		id := fmt.Sprintf("6543210fedcba%011d", v) // 24 characters, as the service's ids
		r := pipeline.Row{VariableID: id, DeviceID: "d", DeviceLabel: "dev", VariableLabel: "x", TsMs: base + int64(v), Value: float64(v), Context: "{}"}
		first = append(first, r)
		r.TsMs += hour
		second = append(second, r)
		touched = append(touched, analyst.Range{VariableID: id, FromMs: math.MinInt64, ToMs: r.TsMs, Loaded: true})
	}
	stream(t, c, first, 5000)
	stream(t, c, second, 5000)
	recompute(t, c, touched)
	if h, l := rolluptest.Check(t, c); h != 2*vars || l != vars {
		t.Errorf("compared %d hourly and %d latest rows, want %d and %d", h, l, 2*vars, vars)
	}
}
