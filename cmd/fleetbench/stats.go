package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// figure is one measured quantity over the runs.
type figure struct {
	// key identifies the figure for the targets and the ratio; name is
	// what the table shows.
	key, name, unit string
	// digits is the number of decimals shown.
	digits int
	vals   []float64
}

func (f *figure) add(v float64) { f.vals = append(f.vals, v) }

// median of the runs; with an even count the mean of the middle two.
func (f *figure) median() float64 {
	if len(f.vals) == 0 {
		return math.NaN()
	}
	s := slices.Clone(f.vals)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func (f *figure) min() float64 {
	if len(f.vals) == 0 {
		return math.NaN()
	}
	return slices.Min(f.vals)
}

func (f *figure) max() float64 {
	if len(f.vals) == 0 {
		return math.NaN()
	}
	return slices.Max(f.vals)
}

func (f *figure) fmt(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.*f", f.digits, v)
}

// cells are the figure's median, min and max, formatted.
func (f *figure) cells() (med, lo, hi string) {
	return f.fmt(f.median()), f.fmt(f.min()), f.fmt(f.max())
}

// section is one of the five measurements with its figures and notes.
type section struct {
	title   string
	figures []*figure
	notes   []string
}

func (s *section) fig(key, name, unit string, digits int) *figure {
	f := &figure{key: key, name: name, unit: unit, digits: digits}
	s.figures = append(s.figures, f)
	return f
}

func (s *section) note(format string, args ...any) {
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
}

// textTable renders sections as a plain-text table for the terminal.
func textTable(secs []*section) string {
	var b strings.Builder
	w := [4]int{len("figure"), len("median"), len("min"), len("max")}
	for _, s := range secs {
		for _, f := range s.figures {
			med, lo, hi := f.cells()
			w[0] = max(w[0], len(f.name)+len(f.unit)+3)
			w[1] = max(w[1], len(med))
			w[2] = max(w[2], len(lo))
			w[3] = max(w[3], len(hi))
		}
	}
	line := func(a, bb, c, d string) {
		fmt.Fprintf(&b, "  %-*s  %*s  %*s  %*s\n", w[0], a, w[1], bb, w[2], c, w[3], d)
	}
	for _, s := range secs {
		if len(s.figures) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s\n", s.title)
		line("figure", "median", "min", "max")
		for _, f := range s.figures {
			med, lo, hi := f.cells()
			line(f.name+" ("+f.unit+")", med, lo, hi)
		}
	}
	return b.String()
}

// cell is the figure as one table cell: the median, then the min and max
// in parentheses when the runs differ at the digits shown.
func (f *figure) cell() string {
	med, lo, hi := f.cells()
	if lo == hi {
		return med
	}
	return med + " (" + lo + ", " + hi + ")"
}

// label is what a table row calls the figure: its name and unit.
func (f *figure) label() string { return f.name + " (" + f.unit + ")" }

// splitSeries cuts a figure name "series: quantity" at its first ": "
// outside parentheses and backquotes, so that "1 % changed: wall time" and
// "nothing changed: wall time" are one quantity of two series, and
// "walk alone (variables_listing: auto): wall time" or "1 % changed: wall
// time with `sync.rollups: false`" are cut where they should be; ok is
// false for a name without one.
func splitSeries(name string) (series, quantity string, ok bool) {
	depth, code := 0, false
	for i, r := range name {
		switch {
		case r == '`':
			code = !code
		case code:
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ':' && depth == 0 && i > 0 && strings.HasPrefix(name[i:], ": "):
			return name[:i], name[i+2:], true
		}
	}
	return "", name, false
}

// grid is a table of figures: a row per quantity, a column per series of
// runs (a section, or a setting within one), "" where a series lacks the
// quantity. It keeps the report short: the same quantity measured under
// several settings is one row, not one row per setting.
type grid struct {
	cols   []string
	labels []string
	cells  [][]string // [row][col]
}

// put sets the cell of quantity label in column col, adding the row; it
// reports false when that cell is already set (a figure would be lost).
func (g *grid) put(label string, col int, cell string) bool {
	row := slices.Index(g.labels, label)
	if row < 0 {
		g.labels = append(g.labels, label)
		g.cells = append(g.cells, make([]string, len(g.cols)))
		row = len(g.labels) - 1
	}
	if g.cells[row][col] != "" {
		return false
	}
	g.cells[row][col] = cell
	return true
}

// pivot lays out a section whose figures are quantities of several series
// (every name "series: quantity") as a grid with a column per series, when
// that saves at least a third of its rows; ok is false otherwise, and the
// section keeps a row per figure.
func pivot(s *section) (g *grid, ok bool) {
	type split struct{ series, label string }
	var parts []split
	var cols []string
	for _, f := range s.figures {
		series, quantity, ok := splitSeries(f.name)
		if !ok {
			return nil, false
		}
		if !slices.Contains(cols, series) {
			cols = append(cols, series)
		}
		parts = append(parts, split{series, quantity + " (" + f.unit + ")"})
	}
	g = &grid{cols: cols}
	for i, f := range s.figures {
		if !g.put(parts[i].label, slices.Index(cols, parts[i].series), f.cell()) {
			return nil, false
		}
	}
	if len(cols) < 2 || 3*len(g.labels) > 2*len(s.figures) {
		return nil, false
	}
	return g, true
}

// sectionLabel is a section's short name for a column: its number ("3b"
// of "3b. fleetsync end to end …"), else its title up to the first colon.
func sectionLabel(title string) string {
	if i := strings.Index(title, ". "); i > 0 && i <= 4 {
		return title[:i]
	}
	if i := strings.Index(title, ":"); i > 0 {
		return title[:i]
	}
	return title
}

// joins reports whether section s measures the same quantities as first,
// so that they can share one table with a column each: neither is pivoted,
// and every figure of s has a row in first, which s fills at least half of.
func joins(first, s *section) bool {
	if len(s.figures) < 2 || 2*len(s.figures) < len(first.figures) {
		return false
	}
	if _, ok := pivot(first); ok {
		return false
	}
	if _, ok := pivot(s); ok {
		return false
	}
	for _, f := range s.figures {
		if !slices.ContainsFunc(first.figures, func(g *figure) bool { return g.label() == f.label() }) {
			return false
		}
	}
	return uniqueLabels(first) && uniqueLabels(s)
}

// uniqueLabels reports whether no two figures of s share a row label.
func uniqueLabels(s *section) bool {
	seen := map[string]bool{}
	for _, f := range s.figures {
		if seen[f.label()] {
			return false
		}
		seen[f.label()] = true
	}
	return true
}

// tableGroups cuts secs into runs of consecutive sections that share one
// table (see joins); most groups hold one section.
func tableGroups(secs []*section) [][]*section {
	var out [][]*section
	for _, s := range secs {
		if n := len(out); n > 0 && joins(out[n-1][0], s) {
			out[n-1] = append(out[n-1], s)
			continue
		}
		out = append(out, []*section{s})
	}
	return out
}

// groupGrid lays out a group of sections as one grid: a section alone is
// pivoted when that pays, else it gets one column of its figures; a group
// of several gets a column per section, named by its label.
func groupGrid(group []*section) *grid {
	if len(group) == 1 {
		if g, ok := pivot(group[0]); ok {
			return g
		}
		g := &grid{cols: []string{"median (min, max)"}}
		for _, f := range group[0].figures {
			g.labels = append(g.labels, f.label())
			g.cells = append(g.cells, []string{f.cell()})
		}
		return g
	}
	g := &grid{}
	for _, s := range group {
		g.cols = append(g.cols, sectionLabel(s.title))
	}
	for col, s := range group {
		for _, f := range s.figures {
			g.put(f.label(), col, f.cell()) // labels are unique in a section (joins)
		}
	}
	return g
}

// markdown renders the grid as a Markdown table.
func (g *grid) markdown() string {
	var b strings.Builder
	b.WriteString("| figure | " + strings.Join(g.cols, " | ") + " |\n|---" + strings.Repeat("|---:", len(g.cols)) + "|\n")
	for i, l := range g.labels {
		b.WriteString("| " + l + " | " + strings.Join(g.cells[i], " | ") + " |\n")
	}
	return b.String()
}
