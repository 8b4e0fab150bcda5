package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const dashboardPath = "grafana/fleetsync-dashboard.json"

// dashboard is the part of a Grafana dashboard model these tests read.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
}

// templateVar is a dashboard variable ($datasource, $job, $instance).
type templateVar struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Definition string          `json:"definition"`
	Query      json.RawMessage `json:"query"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
		// Query is the SQL of a ClickHouse panel's target.
		Query string `json:"query"`
	} `json:"targets"`
}

// clickHouseUID is the data source of the fleet panels, which read the
// warehouse's analyst tables instead of fleetsync's metrics.
const clickHouseUID = "${clickhouse}"

// sql reports whether the panel reads ClickHouse.
func (p panel) sql() bool { return p.Datasource != nil && p.Datasource.UID == clickHouseUID }

func readDashboard(t testing.TB) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(mustRead(t, dashboardPath), &d); err != nil {
		t.Fatalf("%s: not valid JSON: %v", dashboardPath, err)
	}
	return d
}

// queries returns every PromQL text of the dashboard, panel targets and
// template-variable queries alike, keyed by where it is.
func (d dashboard) queries() map[string]string {
	q := map[string]string{}
	for _, p := range d.Panels {
		if p.sql() {
			continue
		}
		for _, tg := range p.Targets {
			q[fmt.Sprintf("panel %d (%s) target %s", p.ID, p.Title, tg.RefID)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			q["variable "+v.Name] = v.Definition
		}
	}
	return q
}

// TestDashboardIsAWellFormedGrafanaDashboard checks the structure Grafana
// relies on when importing: unique panel ids, panels inside the 24-column
// grid, a query per panel with unique refIds, and the data source taken from
// the dashboard's variable so it imports into any Grafana.
func TestDashboardIsAWellFormedGrafanaDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Errorf("dashboard title %q, uid %q, schemaVersion %d: all must be set", d.Title, d.UID, d.SchemaVersion)
	}
	ids := map[int]bool{}
	var rows []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d (%s): gridPos %+v outside the 24-column grid", p.ID, p.Title, p.GridPos)
		}
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if p.Datasource == nil || (p.Datasource.UID != "${datasource}" && p.Datasource.UID != clickHouseUID) {
			t.Errorf("panel %d (%s): datasource %+v, want uid ${datasource} (metrics) or %s (fleet tables)", p.ID, p.Title, p.Datasource, clickHouseUID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %d (%s) has no query", p.ID, p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			text := tg.Expr
			if p.sql() {
				text = tg.Query
			}
			if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(text) == "" {
				t.Errorf("panel %d (%s): target %q has an empty or repeated refId or no query", p.ID, p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
		}
	}
	for _, want := range []string{"Lag", "Throughput", "Errors", "Durations", "Fleet"} {
		if !slices.Contains(rows, want) {
			t.Errorf("dashboard rows %v lack %q", rows, want)
		}
	}
	for _, v := range []string{"datasource", "job", "instance", "clickhouse", "database"} {
		if !slices.ContainsFunc(d.Templating.List, func(x templateVar) bool { return x.Name == v }) {
			t.Errorf("dashboard has no $%s variable", v)
		}
	}
}

// TestDashboardUsesOnlyKnownMetricsAndAllOfThem fails on a panel reading a
// metric fleetsync does not export, and on an exported metric no panel shows.
func TestDashboardUsesOnlyKnownMetricsAndAllOfThem(t *testing.T) {
	known := knownMetrics(t)
	used := map[string]bool{}
	for where, q := range readDashboard(t).queries() {
		for _, name := range fleetsyncMetricRE.FindAllString(q, -1) {
			base, ok := metricBase(known, name)
			if !ok {
				t.Errorf("%s uses %s, which is not in metrics.txt", where, name)
				continue
			}
			used[base] = true
		}
	}
	var unused []string
	for name := range known {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("no dashboard panel shows %v", unused)
	}
}

// TestDashboardQueriesAreValidPromQL has promtool parse every panel query,
// each wrapped as a recording rule, after replacing Grafana's variables by
// values of the right shape.
func TestDashboardQueriesAreValidPromQL(t *testing.T) {
	d := readDashboard(t)
	vars := strings.NewReplacer(
		"$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h",
		"$job", ".*", "$instance", ".*",
	)
	var rules []monitoringv1.Rule
	var where []string
	for _, p := range d.Panels {
		if p.sql() {
			continue
		}
		for _, tg := range p.Targets {
			expr := vars.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %d (%s) target %s: unknown variable in %q", p.ID, p.Title, tg.RefID, tg.Expr)
				continue
			}
			rules = append(rules, monitoringv1.Rule{
				Record: fmt.Sprintf("dashboard:panel_%d_%s", p.ID, tg.RefID),
				Expr:   intstr.FromString(expr),
			})
			where = append(where, fmt.Sprintf("panel %d (%s) target %s", p.ID, p.Title, tg.RefID))
		}
	}
	data, err := yaml.Marshal(ruleFile{Groups: []monitoringv1.RuleGroup{{Name: "dashboard", Rules: rules}}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, "check", "rules", p); err != nil {
		// promtool names the failing rule by its position in the group.
		t.Fatalf("dashboard queries are not valid PromQL: %v\n%s\nqueries in order: %s", err, out, strings.Join(where, "; "))
	}
	if !bytes.Contains(data, []byte("dashboard:panel_")) {
		t.Fatalf("no query was checked")
	}
}
