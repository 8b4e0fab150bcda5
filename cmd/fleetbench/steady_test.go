package main

import (
	"bytes"
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/config"
)

// buildBinaries builds fleetsync and fleetsim from this tree into a
// directory of the test's, as `make build` does into bin/.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"fleetsync", "fleetsim"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "../"+name)
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build ../%s: %v\n%s", name, err, out)
		}
	}
	return dir
}

// The steady-state section (issue 37) on a tiny fleet for two recheck
// periods of one-second cycles, so the benchmark cannot rot: it runs the real daemon, writes
// points of every class, and its report is produced and consistent: every
// point written is in datapoints FINAL once and was seen by the freshness
// poll, fleetsim served at least the points fleetsync loaded, and each
// figure and target is there.
func TestSteadyStateSectionReportsATinyLiveFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ClickHouse, fleetsim and the daemon for about half a minute")
	}
	bin := buildBinaries(t)
	d := config.Default()
	o := &options{bin: bin, runs: 1, only: map[string]bool{"steady": true},
		tune: tuning{RowsPerRequest: d.Sync.RowsPerRequest, VariablesPerRequest: d.Sync.VariablesPerRequest, MaxInFlight: d.Sync.MaxInFlight,
			BatchRows: d.Sync.BatchRows, InsertWorkers: d.Sync.InsertWorkers, PageSize: d.Source.PageSize},
		steady: steadyOptions{period: time.Second, length: 2, shapes: []steadyShape{
			{key: "tiny", title: "tiny", devices: 2, vars: 4, points: 2000, span: "1d", silent: 1, once: 2, perSecond: 12},
		}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	b, err := newBench(ctx, o, &stdout, &stderr, []string{"-only", "steady"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if err := b.steadyState(ctx); err != nil {
		t.Fatalf("steady state: %v\n%s", err, stderr.String())
	}
	if len(b.steady) != 1 {
		t.Fatalf("%d results, want 1", len(b.steady))
	}
	r := b.steady[0]
	if r.landed != r.expected || r.unseen != 0 {
		t.Errorf("datapoints FINAL holds %d rows, want %d (the first sync's and every point written); %d points never seen\n%s", r.landed, r.expected, r.unseen, stderr.String())
	}
	for c := range numClasses {
		if r.written[c] == 0 {
			t.Errorf("the writers wrote no %s point: the run does not exercise them", classNames[c])
		}
		if r.seen[c] != r.written[c] {
			t.Errorf("%s: %d points written, %d freshness figures", classNames[c], r.written[c], r.seen[c])
		}
	}
	if r.cycles < 3 {
		t.Errorf("%d cycles measured in the steady state, a recheck period of 12 one-second cycles, want at least 3", r.cycles)
	}
	if r.served < r.loaded || r.loaded <= 0 {
		t.Errorf("per new point: %.2f rows served, %.2f points loaded; fleetsim serves every point fleetsync loads", r.served, r.loaded)
	}
	if r.data <= 0 {
		t.Errorf("%.2f data requests per cycle while points arrive every second", r.data)
	}
	if r.listPages != 2 {
		t.Errorf("device and variable pages: %v, want 2 (one of each)", r.listPages)
	}
	sec := b.secs[0]
	for _, f := range sec.figures {
		// The server's CPU is net of what the freshness poll costs alone,
		// which noise can turn negative on a busy machine.
		if len(f.vals) != 1 || math.IsNaN(f.vals[0]) || (f.vals[0] < 0 && !strings.Contains(f.name, "CPU")) {
			t.Errorf("figure %q: %v, want one value ≥ 0", f.name, f.vals)
		}
	}
	text := b.render(nil, time.Minute)
	if testing.Verbose() {
		t.Log(text)
	}
	for _, want := range []string{"#### 11. Steady state", "| figure | tiny, first recheck period | tiny, steady |", "| points loaded per new point; bound ≤ 1.5 (points) |", "points loaded per new point ≤ 1.5", "late points land within idle_recheck + one period", "**tiny**"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	for _, tg := range b.steadyTargets() {
		if tg.verdict() == "not measured" || !strings.Contains(tg.measured, "tiny ") {
			t.Errorf("target %q: %q, %s", tg.what, tg.measured, tg.verdict())
		}
	}
}

func TestRequestKindSortsFleetsimCounters(t *testing.T) {
	for key, want := range map[string]string{
		"POST /api/v1.6/data/raw/series 200":                          "data",
		"POST /api/v1.6/data/stats/aggregation/ 200":                  "count",
		"GET /api/v2.0/devices/ 200":                                  "devices",
		"GET /api/v2.0/variables/ 200":                                "variables",
		"GET /api/v2.0/devices/{device_key}/variables/ 200":           "variables",
		"GET /api/v2.0/device_groups/ 200":                            "groups",
		"GET /api/v2.0/device_groups/{device_group_key}/devices/ 200": "groups",
		"GET /api/v2.0/organizations/ 403":                            "organizations",
		"GET /api/v2.0/organizations/{organization_key}/devices/ 200": "organizations",
		"cut POST /api/v1.6/data/raw/series":                          "",
		"early GET /api/v2.0/devices/":                                "",
	} {
		if got := requestKind(key); got != want {
			t.Errorf("requestKind(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestParseExpositionKeepsLabelsAndSkipsComments(t *testing.T) {
	in := `# HELP fleetsync_rows_inserted_total Rows.
# TYPE fleetsync_rows_inserted_total counter
fleetsync_rows_inserted_total{table="datapoints"} 1.5e+06
fleetsync_rows_inserted_total{table="variables"} 24
fleetsync_points_loaded_total 1500000
`
	got, err := parseExposition(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	from := snapshot{metrics: map[string]float64{`fleetsync_rows_inserted_total{table="datapoints"}`: 5e5}}
	to := snapshot{metrics: got}
	if v := metricBetween(from, to, "fleetsync_rows_inserted_total"); v != 1e6+24 {
		t.Errorf("rows inserted between: %v, want %v", v, 1e6+24)
	}
	if v := metricBetween(snapshot{}, to, "fleetsync_points_loaded_total"); v != 1.5e6 {
		t.Errorf("points loaded: %v (samples %v)", v, got)
	}
}

func TestQuantileIsTheNearestRank(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ q, want float64 }{{0.5, 5}, {0.99, 10}, {1, 10}, {0, 1}, {0.1, 1}, {0.11, 2}} {
		if got := quantile(s, tc.q); got != tc.want {
			t.Errorf("quantile %v = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %v, want NaN", got)
	}
}
