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
	for _, want := range []string{"intro by hand", "## Findings\n\nkept by hand\n", "| one stream (rows/s) | 1000 |", beginMarker, endMarker} {
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
	wantVerdicts(t, b, "", map[string]string{
		"5 M backfill: wall time the analyst tables add ≤ 20 % of the wall time":                 "met",
		"dense backfill of cut frames: wall time the analyst tables add ≤ 20 % of the wall time": "MISSED",
		"5 M backfill: wall time the analyst tables add < 10 % of the wall time":                 "MISSED",
	})
}

// wantVerdicts fails t unless each target of b named in want has the
// verdict want gives it ("met" or "MISSED"); why is added to each error.
func wantVerdicts(t *testing.T, b *bench, why string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, tg := range b.targets() {
		if _, ok := want[tg.what]; ok {
			got[tg.what] = tg.verdict() + " at " + tg.measured
		}
	}
	for what, verdict := range want {
		if !strings.HasPrefix(got[what], verdict+" ") {
			t.Errorf("%q: %q, want %s%s", what, got[what], verdict, why)
		}
	}
}

func TestCellShowsMinAndMaxOnlyWhenTheRunsDiffer(t *testing.T) {
	for _, tc := range []struct {
		vals   []float64
		digits int
		want   string
	}{
		{[]float64{2, 2, 2}, 0, "2"},
		{[]float64{7.6, -6.5, 15.1}, 1, "7.6 (-6.5, 15.1)"},
		{[]float64{1.001, 1.002, 1.003}, 1, "1.0"},
		{nil, 2, "n/a"},
	} {
		f := figure{vals: tc.vals, digits: tc.digits}
		if got := f.cell(); got != tc.want {
			t.Errorf("%v at %d digits: cell %q, want %q", tc.vals, tc.digits, got, tc.want)
		}
	}
}

// newFig adds to s a figure of the given runs.
func newFig(s *section, name, unit string, vals ...float64) {
	f := s.fig("", name, unit, 1)
	for _, v := range vals {
		f.add(v)
	}
}

func TestPivotPutsEachSettingInAColumnOfItsOwn(t *testing.T) {
	s := &section{title: "5. incremental"}
	newFig(s, "1 % changed: data requests", "requests", 2, 2, 2)
	newFig(s, "1 % changed: wall time", "s", 0.4, 0.5, 0.6)
	newFig(s, "nothing changed: data requests", "requests", 0, 0, 0)
	newFig(s, "nothing changed: wall time", "s", 0.3)
	newFig(s, "walk alone, per device (variables_listing: per_device): wall time", "s", 0.2)
	newFig(s, "1 % changed: wall time with `sync.rollups: false`", "s", 0.33)
	g, ok := pivot(s)
	if !ok {
		t.Fatal("a section of three settings of two quantities was not pivoted")
	}
	want := "| figure | 1 % changed | nothing changed | walk alone, per device (variables_listing: per_device) |\n|---|---:|---:|---:|\n" +
		"| data requests (requests) | 2.0 | 0.0 |  |\n" +
		"| wall time (s) | 0.5 (0.4, 0.6) | 0.3 | 0.2 |\n" +
		"| wall time with `sync.rollups: false` (s) | 0.3 |  |  |\n"
	if got := g.markdown(); got != want {
		t.Errorf("pivoted table:\n%s\nwant:\n%s", got, want)
	}
}

// A section pivot would garble is not pivoted: a figure without a setting,
// settings that share no quantity (one row per figure anyway), the same
// figure twice.
func TestPivotRefusesSectionsItWouldGarble(t *testing.T) {
	type fig struct {
		name, unit string
		val        float64
	}
	for _, tc := range []struct {
		fail string // the error if pivot takes the section
		figs []fig
	}{
		{"a section with a figure of no setting was pivoted", []fig{{"one stream", "rows/s", 1}, {"one stream: parts written", "parts", 1}, {"two streams: parts written", "parts", 1}}},
		{"a section whose settings share no quantity was pivoted", []fig{{"a: x", "s", 1}, {"b: y", "s", 1}, {"c: z", "s", 1}}},
		{"a section with the same figure twice was pivoted, losing one", []fig{{"a: x", "s", 1}, {"a: x", "s", 2}, {"b: x", "s", 3}}},
	} {
		s := &section{}
		for _, f := range tc.figs {
			newFig(s, f.name, f.unit, f.val)
		}
		if _, ok := pivot(s); ok {
			t.Error(tc.fail)
		}
	}
}

func TestSectionsOfTheSameQuantitiesShareATable(t *testing.T) {
	e2e := &section{title: "3. end to end"}
	for _, n := range []string{"rate", "peak RSS", "wall time", "rollup time"} {
		newFig(e2e, n, "u", 1)
	}
	cut := &section{title: "3b. cut frames"}
	for _, n := range []string{"rate", "peak RSS", "wall time", "rollup time"} {
		newFig(cut, n, "u", 2)
	}
	mem := &section{title: "4. Memory: dense"}
	for _, n := range []string{"peak RSS", "rate"} {
		newFig(mem, n, "u", 3)
	}
	other := &section{title: "Compression: none and lz4"}
	for _, n := range []string{"rate", "wall time, compression none", "wall time, compression lz4"} {
		newFig(other, n, "u", 4)
	}
	groups := tableGroups([]*section{e2e, cut, mem, other})
	if len(groups) != 2 || len(groups[0]) != 3 || groups[1][0] != other {
		t.Fatalf("groups %v, want [3 3b 4] [Compression]", groups)
	}
	want := "| figure | 3 | 3b | 4 |\n|---|---:|---:|---:|\n" +
		"| rate (u) | 1.0 | 2.0 | 3.0 |\n| peak RSS (u) | 1.0 | 2.0 | 3.0 |\n| wall time (u) | 1.0 | 2.0 |  |\n| rollup time (u) | 1.0 | 2.0 |  |\n"
	if got := groupGrid(groups[0]).markdown(); got != want {
		t.Errorf("shared table:\n%s\nwant:\n%s", got, want)
	}
	if got := sectionLabel(other.title); got != "Compression" {
		t.Errorf("label of %q: %q", other.title, got)
	}
}

// Every figure of every section is in the report, once, whatever table
// it lands in, and a note two sections share is printed once.
func TestReportKeepsEveryFigureAndPrintsANoteOnce(t *testing.T) {
	b := &bench{o: &options{runs: 3, tune: tuning{VariablesPerRequest: 50}}, stdout: io.Discard, stderr: io.Discard, began: time.Now(),
		machine: []string{"CPUs (`nproc`): 2", "Go: go1.26"}}
	v := 100.0
	add := func(s *section, name string) {
		v++
		newFig(s, name, "u", v, v+0.5, v+0.25)
	}
	one := b.section("1. ceiling")
	add(one, "one stream")
	add(one, "one stream: parts written")
	e2e, cut := b.section("3. e2e"), b.section("3b. cut")
	for _, s := range []*section{e2e, cut} {
		for _, n := range []string{"rate", "peak RSS", "wall time"} {
			add(s, n)
		}
		s.note("Configuration: the defaults.")
	}
	incr := b.section("5. incremental")
	for _, n := range []string{"1 % changed: data requests", "1 % changed: wall time", "nothing changed: data requests", "nothing changed: wall time"} {
		add(incr, n)
	}
	b.profileTop = "Type: cpu\nShowing nodes accounting for 2.58s, 83.77% of 3.08s total\n      flat  flat%   sum%        cum   cum%\n     0.69s 22.40% 22.40%      0.69s 22.40%  runtime.memmove\n"
	b.profileNote = "In-process cycle."
	text := b.render(nil, time.Minute)
	for _, s := range b.secs {
		for _, f := range s.figures {
			if c := f.cell(); strings.Count(text, " "+c+" |") != 1 {
				t.Errorf("figure %q (%s) appears %d times in the report:\n%s", f.name, c, strings.Count(text, " "+c+" |"), text)
			}
		}
	}
	if n := strings.Count(text, "Configuration: the defaults."); n != 1 {
		t.Errorf("the shared note is printed %d times, want 1:\n%s", n, text)
	}
	for _, want := range []string{"Machine: CPUs (`nproc`): 2; Go: go1.26.", "| figure | 3 | 3b |", "| figure | 1 % changed | nothing changed |", "runtime.memmove", "(of 3.08s total)", "### Targets"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

func TestTopRowsKeepsTheHeaderAndTheTopEntries(t *testing.T) {
	listing := `Type: alloc_space
Showing nodes accounting for 687.16MB, 94.55% of 726.74MB total
Dropped 123 nodes (cum <= 3.63MB)
      flat  flat%   sum%        cum   cum%
  205.94MB 28.34% 28.34%   205.94MB 28.34%  pipeline.(*Batch).Append
  198.97MB 27.38% 55.72%   404.91MB 55.72%  pipeline.(*frameSink).Point
  142.52MB 19.61% 75.33%   142.52MB 19.61%  proto.(*ColStr).Append
`
	want := `      flat  flat%   sum%        cum   cum%   (of 726.74MB total)
  205.94MB 28.34% 28.34%   205.94MB 28.34%  pipeline.(*Batch).Append
  198.97MB 27.38% 55.72%   404.91MB 55.72%  pipeline.(*frameSink).Point`
	if got := topRows(listing, 2); got != want {
		t.Errorf("topRows:\n%s\nwant:\n%s", got, want)
	}
	if got := topRows(listing, 10); strings.Count(got, "\n") != 3 {
		t.Errorf("topRows with more rows asked than listed:\n%s", got)
	}
	if got := topRows("no listing here", 2); got != "no listing here" {
		t.Errorf("an unrecognised listing became %q", got)
	}
}

// Issue 27: docs/benchmarks.md is the latest report, the method and the
// bounds, in at most 250 lines; earlier runs are in git.
func TestTheBenchmarksDocumentIsAtMost250Lines(t *testing.T) {
	text, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "\n"); n > 250 {
		t.Errorf("docs/benchmarks.md has %d lines, more than 250: keep the generated report compact (report.go) and the hand-written parts short; history belongs in git", n)
	}
	for _, want := range []string{beginMarker, endMarker, "### Targets"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("docs/benchmarks.md lacks %q", want)
		}
	}
}

// Issue 26: the 20 M backfill's memory is bound on every data shape of the
// memory section, each by its own figure: fleetsim's data, whole series in
// a frame, contexts 5 times larger, `results` before `columns`.
func TestTargetsBoundTheMemoryOfEachDenseBackfillShape(t *testing.T) {
	b := &bench{o: &options{runs: 3, tune: tuning{VariablesPerRequest: 50}}, stdout: io.Discard, stderr: io.Discard, began: time.Now()}
	for tag, rss := range map[string][]float64{"flat": {150, 152, 160}, "flat50k": {140, 141, 142}, "flatctx": {200, 230, 390}, "flatfirst": {210, 218, 250}} {
		f := b.section("4 "+tag).fig("rss-"+tag, "peak RSS of fleetsync", "MiB", 0)
		for _, v := range rss {
			f.add(v)
		}
	}
	wantVerdicts(t, b, " (the worst run decides)", map[string]string{
		"peak RSS of the 20 M dense backfill ≤ 256 MiB":                                 "met",
		"peak RSS of the 20 M dense backfill with rows_per_request 50000 ≤ 256 MiB":     "met",
		"peak RSS of the 20 M dense backfill with contexts 5 times larger ≤ 256 MiB":    "MISSED",
		"peak RSS of the 20 M dense backfill with `results` before `columns` ≤ 256 MiB": "met",
	})
}
