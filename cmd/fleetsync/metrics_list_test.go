package main

import (
	"context"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// descRe reads a metric's name and variable labels from prometheus.Desc's
// String form.
var descRe = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// TestEveryExportedMetricIsInTheDeployListAndTheOperationsGuide keeps
// deploy/metrics.txt (what the alert rules and the dashboard may use, checked
// by deploy's tests) and the metrics table of docs/operations.md equal to
// what fleetsync really registers: a metric renamed or a label added in the
// code would otherwise leave an alert reading a series that never exists.
func TestEveryExportedMetricIsInTheDeployListAndTheOperationsGuide(t *testing.T) {
	w := newWorld(t, worldOpts{})
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard}
	cfg, err := loadConfig(env, w.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := openApp(ctx, env, cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// A cycle, so that most families have a sample and show their type.
	if err := a.syncOnce(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}

	registered := map[string]string{} // name -> sorted label names
	ch := make(chan *prometheus.Desc)
	go func() { a.reg.Describe(ch); close(ch) }()
	for d := range ch {
		m := descRe.FindStringSubmatch(d.String())
		if m == nil || !strings.HasPrefix(m[1], "fleetsync_") {
			continue
		}
		labels := strings.Split(m[2], ",")
		if m[2] == "" {
			labels = nil
		}
		sort.Strings(labels)
		registered[m[1]] = strings.Join(labels, ",")
	}
	types := map[string]string{}
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}

	b, err := os.ReadFile("../../deploy/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	var diffs []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		labels := ""
		if len(f) > 2 {
			l := strings.Split(f[2], ",")
			sort.Strings(l)
			labels = strings.Join(l, ",")
		}
		listed[f[0]] = labels
		if typ, ok := types[f[0]]; ok && typ != f[1] {
			diffs = append(diffs, f[0]+": listed as "+f[1]+", exported as "+typ)
		}
	}
	for name, labels := range registered {
		switch l, ok := listed[name]; {
		case !ok:
			diffs = append(diffs, name+": registered, missing from deploy/metrics.txt")
		case l != labels:
			diffs = append(diffs, name+": labels ["+labels+"] registered, ["+l+"] in deploy/metrics.txt")
		}
	}
	for name := range listed {
		if _, ok := registered[name]; !ok {
			diffs = append(diffs, name+": in deploy/metrics.txt, never registered")
		}
	}

	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range registered {
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			diffs = append(diffs, name+": no row in the metrics table of docs/operations.md")
		}
	}
	if len(registered) < 20 {
		t.Fatalf("only %d fleetsync_ metrics registered: %v", len(registered), registered)
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("the exported metrics and their lists differ:\n  %s", strings.Join(diffs, "\n  "))
	}
}
