package main

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFigureMedianMinMax(t *testing.T) {
	for _, tc := range []struct {
		vals          []float64
		med, lo, hi   float64
		wantUndefined bool
	}{
		{vals: []float64{3, 1, 2}, med: 2, lo: 1, hi: 3},
		{vals: []float64{4, 1, 3, 2}, med: 2.5, lo: 1, hi: 4},
		{vals: []float64{7}, med: 7, lo: 7, hi: 7},
		{vals: nil, wantUndefined: true},
	} {
		f := figure{vals: tc.vals}
		if tc.wantUndefined {
			if !math.IsNaN(f.median()) || !math.IsNaN(f.min()) || !math.IsNaN(f.max()) {
				t.Errorf("%v: median/min/max = %v/%v/%v, want NaN", tc.vals, f.median(), f.min(), f.max())
			}
			if got := f.fmt(f.median()); got != "n/a" {
				t.Errorf("empty figure formats as %q, want n/a", got)
			}
			continue
		}
		if f.median() != tc.med || f.min() != tc.lo || f.max() != tc.hi {
			t.Errorf("%v: median/min/max = %v/%v/%v, want %v/%v/%v", tc.vals, f.median(), f.min(), f.max(), tc.med, tc.lo, tc.hi)
		}
	}
}

func TestFigureMedianLeavesRunOrder(t *testing.T) {
	f := figure{vals: []float64{3, 1, 2}}
	_ = f.median()
	if f.vals[0] != 3 || f.vals[1] != 1 || f.vals[2] != 2 {
		t.Errorf("median reordered the runs: %v", f.vals)
	}
}

func TestParseTimeVReadsRSSCPUAndExit(t *testing.T) {
	out := `	Command being timed: "bin/fleetsync sync --config x.yaml"
	User time (seconds): 6.97
	System time (seconds): 1.37
	Percent of CPU this job got: 57%
	Elapsed (wall clock) time (h:mm:ss or m:ss): 0:14.63
	Maximum resident set size (kbytes): 468836
	Exit status: 1
`
	var u usage
	parseTimeV([]byte(out), &u)
	if u.user != 6.97 || u.sys != 1.37 || u.maxRSS != 468836<<10 || u.exitCode != 1 {
		t.Errorf("parsed %+v, want user 6.97, sys 1.37, maxRSS %d, exit 1", u, 468836<<10)
	}
}

func TestParseCycleLogTakesTheCycleSummary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.log")
	log := `{"level":"info","msg":"cycle planned","to_read":500}
not json at all
{"level":"info","msg":"cycle finished","points":4990000,"requests":10,"read":500,"idle":0,"failed":0,"splits":0,"duration":10.46}
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := parseCycleLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Points != 4990000 || got.Requests != 10 || got.Read != 500 || got.Duration != 10.46 {
		t.Errorf("parsed %+v", got)
	}
	if err := os.WriteFile(path, []byte(`{"msg":"cycle planned"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parseCycleLog(path); err == nil {
		t.Error("a log without a summary line parsed without error")
	}
}

func TestWriteMarkdownKeepsHandWrittenSections(t *testing.T) {
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	before := "# fleetsync benchmarks\n\nintro by hand\n\n" + beginMarker + "\nold figures\n" + endMarker + "\n\n## Findings\n\nkept by hand\n"
	if err := os.WriteFile(out, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bench{o: &options{out: out, runs: 3}, stdout: io.Discard, stderr: io.Discard, began: time.Now()}
	sec := b.section("1. a section")
	sec.fig("ceiling", "one stream", "rows/s", 0).add(1000)
	if err := b.writeMarkdown(nil); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	text := string(got)
	for _, want := range []string{"intro by hand", "## Findings\n\nkept by hand\n", "| one stream (rows/s) | 1000 | 1000 | 1000 |", beginMarker, endMarker} {
		if !strings.Contains(text, want) {
			t.Errorf("rewritten report lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "old figures") {
		t.Errorf("rewritten report still holds the old generated part:\n%s", text)
	}
	if strings.Count(text, beginMarker) != 1 {
		t.Errorf("report holds %d begin markers, want 1", strings.Count(text, beginMarker))
	}
}

func TestProcCPUReadsThisProcess(t *testing.T) {
	// Burn a little CPU so the figure cannot be zero by accident.
	deadline := time.Now().Add(30 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	got, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got <= 0 {
		t.Errorf("procCPU of a process that just computed for 30ms = %v, want > 0", got)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("procCPU of pid -1 returned no error")
	}
}

func TestMeasuredWithoutGNUTimeUsesRusage(t *testing.T) {
	dir := t.TempDir()
	u, err := measured(context.Background(), false, dir, filepath.Join(dir, "log"), "/bin/sh", "-c", "exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if u.exitCode != 3 || u.maxRSS <= 0 || u.via != "wait4 rusage" {
		t.Errorf("usage %+v, want exit 3, a peak RSS and via wait4 rusage", u)
	}
}

func TestParseOptionsRejectsUnknownPart(t *testing.T) {
	if _, err := parseOptions([]string{"-only", "ceiling,nope"}, io.Discard); err == nil {
		t.Error("-only with an unknown part parsed without error")
	}
	o, err := parseOptions([]string{"-quick", "-only", "incr"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.runs != 1 || !o.only["incr"] || o.only["e2e"] {
		t.Errorf("-quick -only incr gave runs %d, only %v", o.runs, o.only)
	}
}

// The benchmark times the README's analyst queries, not versions of its
// own: each constant must be one of the README's SQL blocks (database
// fleet written %[1]s, the trailing ; dropped, white space folded and
// none kept inside parentheses).
func TestAnalystQueriesAreTheREADMEs(t *testing.T) {
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	fold := func(s string) string {
		s = strings.Join(strings.Fields(s), " ")
		return strings.ReplaceAll(strings.ReplaceAll(s, "( ", "("), " )", ")")
	}
	blocks := map[string]bool{}
	for _, b := range strings.Split(string(text), "```sql")[1:] {
		q, _, _ := strings.Cut(b, "```")
		q = strings.TrimSuffix(strings.TrimSpace(q), ";")
		blocks[fold(strings.ReplaceAll(q, "fleet.", "%[1]s."))] = true
	}
	for name, q := range map[string]string{"latestFinalSQL": latestFinalSQL, "latestRollupSQL": latestRollupSQL, "hourlyFinalSQL": hourlyFinalSQL, "hourlyRollupSQL": hourlyRollupSQL} {
		if !blocks[fold(q)] {
			t.Errorf("%s is not one of README.md's SQL examples:\n%s", name, q)
		}
	}
}

// Issue 24: what the analyst tables add is bound on both data shapes,
// fleetsim's and cut frames read again, each by its own figure.
func TestTargetsBoundWhatTheTablesAddToEachBackfill(t *testing.T) {
	b := &bench{o: &options{runs: 3, tune: tuning{VariablesPerRequest: 50}}, stdout: io.Discard, stderr: io.Discard, began: time.Now()}
	e2e := b.section("3. e2e").fig("rollup-extra-e2e", "added", "%", 1)
	cut := b.section("3b. cut").fig("rollup-extra-cut", "added", "%", 1)
	for _, v := range []float64{12, 15, 30} {
		e2e.add(v)
	}
	for _, v := range []float64{18, 25, 26} {
		cut.add(v)
	}
	want := map[string]string{
		"5 M backfill: wall time the analyst tables add ≤ 20 % of the wall time":                 "met",
		"dense backfill of cut frames: wall time the analyst tables add ≤ 20 % of the wall time": "MISSED",
		"5 M backfill: wall time the analyst tables add < 10 % of the wall time":                 "MISSED",
	}
	got := map[string]string{}
	for _, tg := range b.targets() {
		if _, ok := want[tg.what]; ok {
			got[tg.what] = tg.verdict() + " at " + tg.measured
		}
	}
	for what, verdict := range want {
		if !strings.HasPrefix(got[what], verdict+" ") {
			t.Errorf("%q: %q, want %s", what, got[what], verdict)
		}
	}
}
