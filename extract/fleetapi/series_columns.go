package fleetapi

import (
	"fmt"
	"strings"
)

// columns reads `columns` and decides the mode from its shape.
func (d *seriesDecoder) columns() error {
	d.haveCols = true
	if err := d.s.expect('['); err != nil {
		return err
	}
	c, err := d.s.peek()
	if err != nil {
		return err
	}
	switch c {
	case ']':
		d.s.pos++
		if len(d.req.VariableIDs) != 0 {
			return d.fail("the response has no columns for %d variables", len(d.req.VariableIDs))
		}
		return nil
	case '"':
		names, err := d.stringArrayBody()
		if err != nil {
			return err
		}
		d.joined = true
		return d.joinedColumns(names)
	case '[':
		err := elementsAfterOpen(&d.s, "in columns", func() error {
			if err := d.s.expect('['); err != nil {
				return err
			}
			names, err := d.stringArrayBody()
			if err != nil {
				return err
			}
			k := len(d.frames)
			if k >= len(d.req.VariableIDs) {
				return d.fail("the response has more column lists than the %d requested variables", len(d.req.VariableIDs))
			}
			fc, err := d.frameColumns(k, names)
			if err != nil {
				return err
			}
			d.frames = append(d.frames, fc)
			return nil
		})
		if err != nil {
			return err
		}
		if len(d.frames) != len(d.req.VariableIDs) {
			return d.fail("the response has %d column lists for %d requested variables", len(d.frames), len(d.req.VariableIDs))
		}
		return nil
	default:
		return syntaxf("unexpected %q in columns", c)
	}
}

// stringArrayBody reads the strings of an array whose '[' is consumed.
func (d *seriesDecoder) stringArrayBody() ([]string, error) {
	var out []string
	err := elementsAfterOpen(&d.s, "in a column list", func() error {
		s, err := d.s.stringValue()
		out = append(out, s)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// otherVariableColumn tells whether name looks like a series column of some
// variable (a known suffix behind a prefix).
func otherVariableColumn(name string) bool {
	for _, suf := range seriesColumns {
		if strings.HasSuffix(name, "."+suf) && len(name) > len(suf)+1 {
			return true
		}
	}
	return false
}

// frameColumns locates the cells of frame k from its returned columns.
func (d *seriesDecoder) frameColumns(k int, names []string) (frameCols, error) {
	vid := d.req.VariableIDs[k]
	fc := frameCols{ts: -1, val: -1, ctx: -1, n: len(names)}
	for j, name := range names {
		suffix, prefixed := strings.CutPrefix(name, vid+".")
		switch {
		case name == suffixTimestamp || prefixed && suffix == suffixTimestamp:
			fc.ts = j
		case prefixed && suffix == suffixValue || name == suffixValue:
			fc.val = j
		case prefixed && suffix == suffixContext || name == suffixContext:
			fc.ctx = j
		case !prefixed && otherVariableColumn(name):
			return fc, &DecodeError{VariableID: vid, Frame: k, Row: -1, Offset: d.s.offset(),
				Msg: fmt.Sprintf("column %q of frame %d belongs to another variable than the requested %s", name, k, vid)}
		}
	}
	return fc, nil
}

// joinedColumns maps the joined frame's columns to variables.
func (d *seriesDecoder) joinedColumns(names []string) error {
	index := make(map[string]int, len(d.req.VariableIDs))
	for i, id := range d.req.VariableIDs {
		if _, dup := index[id]; dup {
			return d.fail("variable %s is requested twice, which a joined frame cannot tell apart", id)
		}
		index[id] = i
	}
	d.jcols = make([]joinedCol, len(names))
	hasTS := false
	hasValue := make([]bool, len(d.req.VariableIDs))
	for j, name := range names {
		jc := joinedCol{kind: colSkip, v: -1}
		if name == suffixTimestamp {
			jc.kind = colTS
			hasTS = true
		} else if i, ok := suffixVariable(name, suffixValue, index); ok {
			jc.kind, jc.v = colValue, i
			hasValue[i] = true
		} else if i, ok := suffixVariable(name, suffixContext, index); ok {
			jc.kind, jc.v = colContext, i
		} else if dot := longestPrefix(name, index); dot >= 0 {
			jc.kind, jc.v = colOther, index[name[:dot]]
		} else if otherVariableColumn(name) {
			return d.fail("joined column %q belongs to no requested variable", name)
		}
		d.jcols[j] = jc
	}
	if !hasTS {
		return d.fail("the joined columns have no `timestamp`")
	}
	for i, ok := range hasValue {
		if !ok {
			d.frame = i
			return d.fail("the joined columns have no value column for variable %s", d.req.VariableIDs[i])
		}
	}
	return nil
}

// suffixVariable tells whether name is "<id>.<suffix>" for a requested id.
func suffixVariable(name, suffix string, index map[string]int) (int, bool) {
	prefix, ok := strings.CutSuffix(name, "."+suffix)
	if !ok {
		return 0, false
	}
	i, ok := index[prefix]
	return i, ok
}

// longestPrefix returns the index of the dot that ends the longest requested
// variable id prefixing name, or -1.
func longestPrefix(name string, index map[string]int) int {
	best := -1
	for i := 0; i < len(name); i++ {
		if name[i] != '.' {
			continue
		}
		if _, ok := index[name[:i]]; ok {
			best = i
		}
	}
	return best
}
