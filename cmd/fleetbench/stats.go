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
