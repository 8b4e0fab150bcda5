package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/fleetsync/fleetsync/load/analyst"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

// Tests that kill mutants make mutate found alive in rollup.go: the hour
// of a timestamp before 1970, the statements a recompute's variables are
// cut into, and the error of a failed hourly statement. Their names match
// the rollup tests make mutate runs (.ci/mutate).

func TestRollupHourStartIsTheFloorOfTheHourOnEitherSideOf1970(t *testing.T) {
	cases := []struct{ ms, want int64 }{
		{0, 0},
		{hourMs - 1, 0},
		{hourMs, hourMs},
		{-1, -hourMs},
		{-hourMs, -hourMs},
		{-hourMs - 1, -2 * hourMs},
		{earliestMs - 5, hourStart(earliestMs)},
	}
	for _, c := range cases {
		if got := hourStart(c.ms); got != c.want {
			t.Errorf("hourStart(%d) = %d, want %d", c.ms, got, c.want)
		}
	}
	if h := hourStart(earliestMs); h > earliestMs || h%hourMs != 0 {
		t.Errorf("hourStart(earliestMs) = %d, want the start of its hour, at or below %d", h, int64(earliestMs))
	}
}

func TestBatchesGroupByTheGrowthOfEveryMembersWindowAtItsBounds(t *testing.T) {
	const h = hourMs
	type group struct {
		w   window
		ids []string
	}
	cases := []struct {
		name string
		ws   []window // of variables a, b, c in this order
		want []group
	}{
		{"equal starts, sorted by end: a 6 h growth joins, a 12 h one does not",
			[]window{{0, 1 * h}, {0, 7 * h}, {0, 13 * h}},
			[]group{{window{0, 7 * h}, []string{"a", "b"}}, {window{0, 13 * h}, []string{"c"}}}},
		{"a closed window grows by its end, not its start",
			[]window{{0, 1 * h}, {1 * h, 100 * h}},
			[]group{{window{0, 1 * h}, []string{"a"}}, {window{1 * h, 100 * h}, []string{"b"}}}},
		{"the shortest member bounds the growth, whichever joined last",
			[]window{{10 * h, 17 * h}, {11 * h, 12 * h}, {12 * h, 18 * h}},
			[]group{{window{10 * h, 17 * h}, []string{"a", "b"}}, {window{12 * h, 18 * h}, []string{"c"}}}},
		{"the first member's own length bounds the growth",
			[]window{{10 * h, 11 * h}, {10 * h, 18 * h}},
			[]group{{window{10 * h, 11 * h}, []string{"a"}}, {window{10 * h, 18 * h}, []string{"b"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var touched []analyst.Range
			byID := map[string]window{}
			for i, w := range c.ws {
				id := string(rune('a' + i))
				touched = append(touched, analyst.Range{VariableID: id})
				byID[id] = w
			}
			var got []group
			for _, b := range batches(touched, rollupBatch, func(t analyst.Range) window { return byID[t.VariableID] }) {
				ids := slices.Clone(b.ids)
				slices.Sort(ids)
				got = append(got, group{b.window, ids})
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("batches %v, want %v", got, c.want)
			}
		})
	}
}

// hourlyExecs counts the hourly recompute statements a Client runs, and
// fails them with fail when it is set.
type hourlyExecs struct {
	driver.Conn
	table string
	mu    sync.Mutex
	n     int
	fail  error
}

func (h *hourlyExecs) Exec(ctx context.Context, query string, args ...any) error {
	if strings.HasPrefix(query, "INSERT INTO "+h.table+" ") {
		h.mu.Lock()
		h.n++
		fail := h.fail
		h.mu.Unlock()
		if fail != nil {
			return fail
		}
	}
	return h.Conn.Exec(ctx, query, args...)
}

// withHourlyExecs wraps c's connection in an hourlyExecs.
func withHourlyExecs(c *Client) *hourlyExecs {
	h := &hourlyExecs{Conn: c.conn, table: c.Table(TableHourly)}
	c.conn = h
	return h
}

func TestRecomputeCutsTheHourlyRowsIntoHourlyStreamsStatements(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	h := withHourlyExecs(c)
	const now = int64(1_800_000_000_000)
	for _, n := range []int{1, 2, 3, 4, 6} {
		var touched []analyst.Range
		for i := range n {
			touched = append(touched, analyst.Range{VariableID: fmt.Sprint("v", i), FromMs: now - hourMs, ToMs: now})
		}
		h.n = 0
		if err := c.AnalystTables().Recompute(context.Background(), touched); err != nil {
			t.Fatal(err)
		}
		if want := min(n, hourlyStreams); h.n != want {
			t.Errorf("%d variables of the same hours: %d hourly statements, want %d", n, h.n, want)
		}
	}
}

// permanentExecErr is an error Retry does not retry.
var permanentExecErr = errors.New("code: 60, message: table does not exist")

func TestRecomputeReportsAFailedHourlyStatement(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	h := withHourlyExecs(c)
	h.fail = permanentExecErr
	const now = int64(1_800_000_000_000)
	for _, n := range []int{1, 2} {
		var touched []analyst.Range
		for i := range n {
			touched = append(touched, analyst.Range{VariableID: fmt.Sprint("v", i), FromMs: now - hourMs, ToMs: now})
		}
		if err := c.AnalystTables().Recompute(context.Background(), touched); !errors.Is(err, permanentExecErr) {
			t.Errorf("%d variables, every hourly statement failing: Recompute returned %v, want the failure", n, err)
		}
	}
}
