package deploy

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite generated files (prometheus/prometheusrule.yaml) instead of comparing them")

const (
	ruleFilePath       = "prometheus/fleetsync-rules.yml"
	ruleTestPath       = "prometheus/fleetsync-rules_test.yml"
	prometheusRulePath = "prometheus/prometheusrule.yaml"
	operationsDocPath  = "../docs/operations.md"
	runbookURLPrefix   = "https://github.com/fleetsync/fleetsync/blob/main/docs/operations.md#"
)

// ruleFile is a Prometheus rule file. Its groups are decoded into
// prometheus-operator's RuleGroup, the type the PrometheusRule embeds, which
// carries the same fields under the same names.
type ruleFile struct {
	Groups []monitoringv1.RuleGroup `json:"groups"`
}

// readRuleFile reads a Prometheus rule file strictly.
func readRuleFile(t testing.TB, name string) ruleFile {
	t.Helper()
	return readStrict[ruleFile](t, name, "rule file")
}

// readStrict decodes the YAML file name into a T, unknown fields an error
// that calls it not a valid what.
func readStrict[T any](t testing.TB, name, what string) T {
	t.Helper()
	var v T
	if err := yaml.UnmarshalStrict(mustRead(t, name), &v); err != nil {
		t.Fatalf("%s: not a valid %s: %v", name, what, err)
	}
	return v
}

// ruleTests is a promtool unit-test file, limited to the parts these tests use.
type ruleTests struct {
	RuleFiles          []string        `json:"rule_files"`
	EvaluationInterval string          `json:"evaluation_interval,omitempty"`
	Tests              []ruleTestGroup `json:"tests"`
}

type ruleTestGroup struct {
	Name           string          `json:"name,omitempty"`
	Interval       string          `json:"interval,omitempty"`
	InputSeries    []inputSeries   `json:"input_series"`
	AlertRuleTests []alertRuleTest `json:"alert_rule_test,omitempty"`
}

type inputSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type alertRuleTest struct {
	EvalTime  string     `json:"eval_time"`
	Alertname string     `json:"alertname"`
	ExpAlerts []expAlert `json:"exp_alerts"`
}

type expAlert struct {
	ExpLabels      map[string]string `json:"exp_labels,omitempty"`
	ExpAnnotations map[string]string `json:"exp_annotations,omitempty"`
}

// readRuleTests reads a promtool unit-test file strictly.
func readRuleTests(t testing.TB, name string) ruleTests {
	t.Helper()
	return readStrict[ruleTests](t, name, "promtool test file")
}

func alertNames(groups []monitoringv1.RuleGroup) []string {
	var names []string
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	return names
}

// promtool runs Debian's promtool (CI installs it; a missing one fails the
// test rather than skipping it) and returns its combined output and error.
func promtool(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (apt-get install prometheus): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

func TestRuleFilePassesPromtoolCheck(t *testing.T) {
	if out, err := promtool(t, "check", "rules", ruleFilePath); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", ruleFilePath, err, out)
	}
}

func TestRuleUnitTestsPass(t *testing.T) {
	if out, err := promtool(t, "test", "rules", ruleTestPath); err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", ruleTestPath, err, out)
	}
}

// TestEveryAlertHasUnitTestsThatFireAndThatStaySilent proves, for each alert,
// that the unit tests would catch it breaking either way: its firing tests
// fail once its expression can never fire, and its silent tests fail once
// its expression always fires. Each check runs only that alert's tests of
// that kind, first against the real rules (they must pass), then against the
// mutated ones (they must fail).
func TestEveryAlertHasUnitTestsThatFireAndThatStaySilent(t *testing.T) {
	rules := readRuleFile(t, ruleFilePath)
	tests := readRuleTests(t, ruleTestPath)
	for _, alert := range alertNames(rules.Groups) {
		t.Run(alert, func(t *testing.T) {
			for _, kind := range []struct {
				firing bool
				expr   string
			}{
				{firing: true, expr: "vector(1) unless vector(1)"},
				{firing: false, expr: "vector(1)"},
			} {
				subset := testsOfKind(tests, alert, kind.firing)
				what := map[bool]string{true: "firing", false: "silent"}[kind.firing]
				if len(subset.Tests) == 0 {
					t.Errorf("%s has no %s unit test in %s", alert, what, ruleTestPath)
					continue
				}
				dir := t.TempDir()
				rulesAbs, err := filepath.Abs(ruleFilePath)
				if err != nil {
					t.Fatal(err)
				}
				if out, err := runRuleTests(t, dir, "real", subset, rulesAbs); err != nil {
					t.Fatalf("%s's %s tests fail on their own against the real rules: %v\n%s", alert, what, err, out)
				}
				mutated := mutateAlert(t, rules, alert, kind.expr)
				mutatedPath := filepath.Join(dir, "mutated-rules.yml")
				if err := os.WriteFile(mutatedPath, mutated, 0o644); err != nil {
					t.Fatal(err)
				}
				// The mutated file itself must be valid, or its tests would
				// fail for the wrong reason.
				if out, err := promtool(t, "check", "rules", mutatedPath); err != nil {
					t.Fatalf("mutated rule file is invalid: %v\n%s", err, out)
				}
				if out, err := runRuleTests(t, dir, "mutated", subset, mutatedPath); err == nil {
					t.Errorf("%s's %s tests still pass with expr %q: they do not test the alert\n%s", alert, what, kind.expr, out)
				}
			}
		})
	}
}

// testsOfKind keeps, of every test group, only the evaluations of alert that
// expect it firing (firing) or silent (!firing), dropping groups left empty.
func testsOfKind(all ruleTests, alert string, firing bool) ruleTests {
	out := ruleTests{EvaluationInterval: all.EvaluationInterval}
	for _, g := range all.Tests {
		var keep []alertRuleTest
		for _, a := range g.AlertRuleTests {
			if a.Alertname == alert && (len(a.ExpAlerts) > 0) == firing {
				if a.ExpAlerts == nil {
					a.ExpAlerts = []expAlert{}
				}
				keep = append(keep, a)
			}
		}
		if len(keep) > 0 {
			g.AlertRuleTests = keep
			out.Tests = append(out.Tests, g)
		}
	}
	return out
}

func runRuleTests(t *testing.T, dir, name string, tests ruleTests, rulesPath string) (string, error) {
	t.Helper()
	tests.RuleFiles = []string{rulesPath}
	data, err := yaml.Marshal(tests)
	if err != nil {
		t.Fatalf("marshal promtool tests: %v", err)
	}
	p := filepath.Join(dir, name+"_test.yml")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return promtool(t, "test", "rules", p)
}

// mutateAlert returns the rule file with alert's expression replaced.
func mutateAlert(t *testing.T, rf ruleFile, alert, expr string) []byte {
	t.Helper()
	var out ruleFile
	for _, g := range rf.Groups {
		g.Rules = slices.Clone(g.Rules)
		for i := range g.Rules {
			if g.Rules[i].Alert == alert {
				g.Rules[i].Expr = intstr.FromString(expr)
			}
		}
		out.Groups = append(out.Groups, g)
	}
	data, err := yaml.Marshal(out)
	if err != nil {
		t.Fatalf("marshal mutated rules: %v", err)
	}
	return data
}

// prometheusRuleHeader is the PrometheusRule wrapped around the rule file's
// groups. Your Prometheus resource's ruleSelector must match its labels.
const prometheusRuleHeader = `# Code generated from fleetsync-rules.yml by deploy's tests. DO NOT EDIT.
# Edit fleetsync-rules.yml, then: cd deploy && go test -run TestPrometheusRuleIsGeneratedFromRuleFile -update
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: fleetsync
  labels:
    app.kubernetes.io/name: fleetsync
    app.kubernetes.io/part-of: fleetsync
spec:
`

// generatePrometheusRule wraps the rule file's groups (from its top-level
// "groups:" line on, comments and all) into a PrometheusRule, textually, so
// that the generated object reads like the source.
func generatePrometheusRule(rules []byte) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(prometheusRuleHeader)
	started := false
	sc := bufio.NewScanner(bytes.NewReader(rules))
	for sc.Scan() {
		line := sc.Text()
		if !started {
			if line != "groups:" {
				continue
			}
			started = true
		}
		if strings.TrimSpace(line) == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("  " + line + "\n")
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !started {
		return nil, fmt.Errorf("no top-level groups: line")
	}
	return b.Bytes(), nil
}

// TestPrometheusRuleIsGeneratedFromRuleFile keeps the PrometheusRule and the
// plain rule file (the one promtool tests) the same rules: the former is
// generated from the latter, and must be regenerated after every edit.
func TestPrometheusRuleIsGeneratedFromRuleFile(t *testing.T) {
	want, err := generatePrometheusRule(mustRead(t, ruleFilePath))
	if err != nil {
		t.Fatalf("generate from %s: %v", ruleFilePath, err)
	}
	if *update {
		if err := os.WriteFile(prometheusRulePath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := mustRead(t, prometheusRulePath)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: edit %s, then run: go test -run TestPrometheusRuleIsGeneratedFromRuleFile -update", prometheusRulePath, ruleFilePath)
	}
	// Belt and braces: the generated object decodes strictly to the same groups.
	objs := decodeObjects(t, strictDecoder(t), prometheusRulePath, got)
	pr, ok := objs[0].(*monitoringv1.PrometheusRule)
	if len(objs) != 1 || !ok {
		t.Fatalf("%s: want one PrometheusRule, got %d objects", prometheusRulePath, len(objs))
	}
	rf := readRuleFile(t, ruleFilePath)
	gotJSON, _ := yaml.Marshal(pr.Spec.Groups)
	wantJSON, _ := yaml.Marshal(rf.Groups)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("PrometheusRule groups differ from %s:\n--- PrometheusRule\n%s\n--- rule file\n%s", ruleFilePath, gotJSON, wantJSON)
	}
}

// TestAlertsCarrySeveritySummaryDescriptionAndRunbook checks what an
// on-call engineer needs on every page: a severity to route on, a summary, a
// description, and a runbook link that lands on a section of
// docs/operations.md.
func TestAlertsCarrySeveritySummaryDescriptionAndRunbook(t *testing.T) {
	anchors := markdownAnchors(t, operationsDocPath)
	rf := readRuleFile(t, ruleFilePath)
	var seen []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if slices.Contains(seen, r.Alert) {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen = append(seen, r.Alert)
			if !strings.HasPrefix(r.Alert, "Fleetsync") {
				t.Errorf("alert %s: name must start with Fleetsync", r.Alert)
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookURLPrefix)
			if !ok {
				t.Errorf("alert %s: runbook_url %q does not start with %s", r.Alert, r.Annotations["runbook_url"], runbookURLPrefix)
				continue
			}
			if anchor != strings.ToLower(r.Alert) {
				t.Errorf("alert %s: runbook anchor %q, want %q (the alert's own section)", r.Alert, anchor, strings.ToLower(r.Alert))
			}
			if !anchors[anchor] {
				t.Errorf("alert %s: %s has no section with anchor #%s", r.Alert, operationsDocPath, anchor)
			}
		}
	}
	for _, want := range []string{
		"FleetsyncSyncLagHigh", "FleetsyncNoRecentSuccess", "FleetsyncCyclesFailing",
		"FleetsyncVariablesFailing", "FleetsyncAPIErrorsHigh",
	} {
		if !slices.Contains(seen, want) {
			t.Errorf("the rules lack %s", want)
		}
	}
}

// markdownAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation dropped, spaces turned into hyphens.
func markdownAnchors(t testing.TB, name string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(mustRead(t, name)), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		anchors[githubAnchor(title)] = true
	}
	return anchors
}

func githubAnchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func TestGitHubAnchorsFollowGitHubsRules(t *testing.T) {
	for title, want := range map[string]string{
		"FleetsyncSyncLagHigh":                 "fleetsyncsynclaghigh",
		"Rotating tokens":                      "rotating-tokens",
		"Reading the lag (`fleetsync status`)": "reading-the-lag-fleetsync-status",
	} {
		if got := githubAnchor(title); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", title, got, want)
		}
	}
}

var fleetsyncMetricRE = regexp.MustCompile(`\bfleetsync_[a-zA-Z0-9_]+`)

// TestRulesUseOnlyKnownMetrics fails on a rule that reads a metric fleetsync
// does not export (a typo would make an alert silently never fire).
func TestRulesUseOnlyKnownMetrics(t *testing.T) {
	known := knownMetrics(t)
	for _, g := range readRuleFile(t, ruleFilePath).Groups {
		for _, r := range g.Rules {
			for _, name := range fleetsyncMetricRE.FindAllString(r.Expr.String(), -1) {
				if _, ok := metricBase(known, name); !ok {
					t.Errorf("rule %s uses %s, which is not in metrics.txt", r.Alert, name)
				}
			}
		}
	}
}
