package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fleetsync/fleetsync"

// goList runs `go list` from the module root with args and returns its
// output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// The product must not link package testing: it registers its flags and
// state in the binary, and it meant test helpers (and their globals) had
// crept into the product. The shared test ClickHouse lives in chtest, which
// only tests import.
func TestTheBinaryDoesNotLinkTesting(t *testing.T) {
	for _, pkg := range goList(t, "-deps", "./cmd/fleetsync") {
		if pkg == "testing" || strings.HasSuffix(pkg, "/chtest") || strings.HasSuffix(pkg, "/simtest") {
			t.Errorf("cmd/fleetsync links %s; move what needs it into a test-only package", pkg)
		}
	}
}

// notInTheBinary are the test doubles the product binary must not link:
// the simulator, the ClickHouse launcher (and all below them) and the
// engine's test kit. The demo
// that needs both is its own command, cmd/fleetsync-demo; tests may still
// use them, since go list -deps without -test sees only the binary.
var notInTheBinary = []string{"extract/fleetsim/...", "load/clickhouse/chserver/...", "pipeline/pipelinetest"}

// doublesIn returns, one line each, the packages of deps (import paths as
// go list prints them) that notInTheBinary forbids.
func doublesIn(deps []string) []string {
	var out []string
	for _, d := range deps {
		rel, ok := strings.CutPrefix(d, module+"/")
		if ok && slices.ContainsFunc(notInTheBinary, func(pat string) bool { return matches(pat, rel) }) {
			out = append(out, "cmd/fleetsync links "+rel+": a test double belongs in tests or cmd/fleetsync-demo, not in the binary users deploy")
		}
	}
	return out
}

// Issue 27: the binary users deploy carries neither the simulator nor the
// ClickHouse launcher.
func TestTheBinaryDoesNotLinkTheSimulatorNorTheClickHouseLauncher(t *testing.T) {
	for _, v := range doublesIn(goList(t, "-deps", "./cmd/fleetsync")) {
		t.Error(v)
	}
	// The check can fail: it catches each forbidden package and a package below it.
	for _, d := range []string{"extract/fleetsim", "extract/fleetsim/model", "load/clickhouse/chserver", "load/clickhouse/chserver/chtest", "pipeline/pipelinetest"} {
		if len(doublesIn([]string{module + "/" + d})) != 1 {
			t.Errorf("doublesIn lets %s through", d)
		}
	}
	if v := doublesIn([]string{module + "/extract/fleetapi", module + "/load/clickhouse", "net/http"}); len(v) != 0 {
		t.Errorf("doublesIn forbids the product's own packages: %q", v)
	}
}

// depRule forbids packages matching from (a path relative to the module,
// "x/..." for x and everything below it) to depend, directly or not, on a
// module package matching any of to, unless it is one of allow.
type depRule struct {
	why   string
	from  string
	to    []string
	allow []string
}

// depRules are the rooms of docs/architecture.md: data flows extract →
// pipeline → load, the pipeline knows no adapter, the API client and the
// simulator stand alone, and configuration is plain data.
var depRules = []depRule{
	{why: "the pipeline knows no adapter: adapters implement its ports",
		from: "pipeline/...", to: []string{"extract/...", "load/...", "state/...", "cmd/...", "config/..."}},
	{why: "extract and load never import each other: the pipeline is between them",
		from: "extract/...", to: []string{"load/...", "state/..."}},
	{why: "extract and load never import each other: the pipeline is between them",
		from: "load/...", to: []string{"extract/...", "state/..."}},
	{why: "the API client is reusable on its own: it imports nothing of fleetsync",
		from: "extract/fleetapi/...", to: []string{"..."}, allow: []string{"extract/fleetapi/..."}},
	{why: "the simulator stands in for the service: it imports nothing of the sync",
		from: "extract/fleetsim/...", to: []string{"..."}, allow: []string{"extract/fleetsim/..."}},
	{why: "configuration is plain data: it imports no other fleetsync package",
		from: "config/...", to: []string{"..."}, allow: []string{"config/..."}},
	{why: "state keeps marks for the pipeline and may use the ClickHouse client, nothing of the source",
		from: "state/...", to: []string{"extract/...", "cmd/...", "config/..."}},
}

// matches reports whether the module-relative path rel matches pattern.
func matches(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

// violations returns, for each package (module-relative path → its
// module-relative dependencies), the rules it breaks, one line each.
func violations(deps map[string][]string, rules []depRule) []string {
	var out []string
	pkgs := make([]string, 0, len(deps))
	for p := range deps {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		for _, r := range rules {
			if !matches(r.from, p) {
				continue
			}
			for _, d := range deps[p] {
				if !slices.ContainsFunc(r.to, func(pat string) bool { return matches(pat, d) }) ||
					slices.ContainsFunc(r.allow, func(pat string) bool { return matches(pat, d) }) {
					continue
				}
				out = append(out, p+" depends on "+d+": "+r.why)
			}
		}
	}
	return out
}

// moduleDeps lists every package of the module with the module packages it
// depends on (non-test code, as go list -deps sees it).
func moduleDeps(t *testing.T) map[string][]string {
	deps := map[string][]string{}
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...") {
		f := strings.Fields(line)
		rel, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			continue
		}
		deps[rel] = []string{}
		for _, d := range f[1:] {
			if dr, ok := strings.CutPrefix(d, module+"/"); ok {
				deps[rel] = append(deps[rel], dr)
			}
		}
	}
	return deps
}

func TestPackagesKeepTheDependencyRules(t *testing.T) {
	deps := moduleDeps(t)
	for _, must := range []string{"pipeline", "extract/fleetapi", "extract/fleetsim", "load/clickhouse", "state", "config"} {
		if _, ok := deps[must]; !ok {
			t.Fatalf("go list did not report package %s; the rules below would check nothing", must)
		}
	}
	for _, v := range violations(deps, depRules) {
		t.Error(v)
	}
}

// The rules must catch a forbidden import; this feeds them the module's
// real graph with one forbidden edge added per rule.
func TestTheDependencyRulesCatchAForbiddenImport(t *testing.T) {
	real := moduleDeps(t)
	for _, c := range []struct{ from, to string }{
		{"pipeline", "extract/fleetapi"},
		{"pipeline", "load/clickhouse"},
		{"extract/fleetapi", "pipeline"},
		{"extract/fleetsim", "pipeline"},
		{"load/clickhouse", "extract/fleetapi"},
		{"extract/fleetapi", "load/clickhouse"},
		{"config", "pipeline"},
		{"state", "extract/fleetapi"},
	} {
		deps := maps.Clone(real)
		deps[c.from] = append(slices.Clone(deps[c.from]), c.to)
		if v := violations(deps, depRules); len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), c.from+" depends on "+c.to) {
			t.Errorf("an import of %s by %s breaks no rule; got %q", c.to, c.from, v)
		}
	}
}

// rollupWords are the traces of the analyst tables' internals: hours and
// aggregates. They live in the warehouse's analyst tables (load/clickhouse),
// so that neither the engine nor the analyst link (load/analyst) knows more
// than "this range of this variable is durable" (pipeline/commit.go,
// load/analyst RangeOf); `time.Hour` as a duration is no hour arithmetic.
var rollupWords = regexp.MustCompile(`(?i)hour|aggreg|argm(ax|in)`)

// rollupTraces lists, one line each, the identifiers and literals of the
// Go files in dir (tests excluded) that speak of hours or aggregates.
func rollupTraces(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && n.Sel.Name == "Hour" {
					return false
				}
			case *ast.Ident:
				if rollupWords.MatchString(n.Name) {
					out = append(out, fset.Position(n.Pos()).String()+": "+n.Name)
				}
			case *ast.BasicLit:
				if v := strings.ReplaceAll(n.Value, "_", ""); n.Kind == token.INT && v == "3600000" {
					out = append(out, fset.Position(n.Pos()).String()+": "+n.Value)
				}
			}
			return true
		})
	}
	return out
}

// Issue 24: the engine hands the commit chain what a commit made durable
// and knows nothing else of the analyst tables; nor does their link.
func TestTheEngineHasNoHourArithmeticNorAggregateTypes(t *testing.T) {
	for _, dir := range []string{"../../pipeline", "../../pipeline/daemon", "../../pipeline/metadata", "../../load/analyst"} {
		for _, v := range rollupTraces(t, dir) {
			t.Errorf("%s: hours and aggregates belong in the warehouse's analyst tables (load/clickhouse)", v)
		}
	}
	// The check can fail: the analyst tables' own package is full of them.
	if len(rollupTraces(t, "../../load/clickhouse")) == 0 {
		t.Error("found no trace of hours in load/clickhouse; the check sees nothing")
	}
}
