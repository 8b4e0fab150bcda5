package fleetapi

// joinedPoint is a point of the joined frame held until its variable's turn.
type joinedPoint struct {
	ts       int64
	val      float64
	ctxStart int
	ctxEnd   int
	at       position
}

// joinedResults decodes the joined frame and hands it to the sink split by
// variable, in request order. The FrameSink contract is frame by frame, so
// the points are held (bounded by the response) until the frame is complete.
func (d *seriesDecoder) joinedResults() error {
	s := &d.s
	n := len(d.req.VariableIDs)
	var (
		points = make([][]joinedPoint, n)
		rows   = make([]int, n)
		arena  []byte
		// per-row state
		val    = make([]float64, n)
		valOK  = make([]bool, n)
		seen   = make([]bool, n)
		ctxBeg = make([]int, n)
		ctxEnd = make([]int, n)
		at     = make([]position, n)
	)
	more, err := s.firstElement()
	for r := 0; more && err == nil; r++ {
		d.row = r
		for i := range n {
			valOK[i], seen[i], ctxBeg[i], ctxEnd[i], at[i] = false, false, -1, -1, position{}
		}
		var ts int64
		tsOK := false
		j := 0
		var cells bool
		cells, err = s.firstElement()
		for cells && err == nil {
			if j >= len(d.jcols) {
				return d.fail("joined row has more cells than the %d columns", len(d.jcols))
			}
			jc := d.jcols[j]
			switch jc.kind {
			case colTS:
				ts, tsOK, err = d.millisCell()
			case colValue:
				var ok bool
				val[jc.v], ok, err = d.floatCell()
				valOK[jc.v] = ok
				seen[jc.v] = seen[jc.v] || ok
			case colContext:
				start := len(arena)
				var present bool
				var pos position
				arena, present, err = d.contextCell(arena, &pos)
				if present {
					ctxBeg[jc.v], ctxEnd[jc.v], at[jc.v] = start, len(arena), pos
					seen[jc.v] = true
				} else {
					arena = arena[:start]
				}
			case colOther:
				c, perr := s.peek()
				if perr != nil {
					return perr
				}
				if c == 'n' {
					err = s.literal("null")
				} else {
					seen[jc.v] = true
					err = s.walk(nil, 0)
				}
			default:
				err = s.walk(nil, 0)
			}
			if err != nil {
				if jc.v >= 0 {
					d.frame = jc.v
				}
				return err
			}
			j++
			cells, err = s.nextElement("between cells")
		}
		if err != nil {
			return err
		}
		if j != len(d.jcols) {
			return d.fail("joined row has %d cells but the columns name %d", j, len(d.jcols))
		}
		for i := range n {
			if !seen[i] {
				continue
			}
			rows[i]++
			if !tsOK || !valOK[i] {
				continue
			}
			if err := d.checkTimestamp(ts); err != nil {
				if de, ok := err.(*DecodeError); ok {
					de.VariableID, de.Frame, de.tied = d.req.VariableIDs[i], i, true
				}
				return err
			}
			points[i] = append(points[i], joinedPoint{ts: ts, val: val[i], ctxStart: ctxBeg[i], ctxEnd: ctxEnd[i], at: at[i]})
		}
		more, err = s.nextElement("between rows")
	}
	if err != nil {
		return err
	}
	d.row = -1
	empty := []byte("{}")
	for i := range n {
		d.frame = i
		for _, p := range points[i] {
			ctx := empty
			if p.ctxStart >= 0 {
				ctx = arena[p.ctxStart:p.ctxEnd]
			}
			if err := d.sink.Point(i, p.at.point(p.ts, p.val, ctx)); err != nil {
				return &sinkError{err}
			}
		}
		if err := d.sink.EndFrame(i, rows[i]); err != nil {
			return &sinkError{err}
		}
	}
	d.frame = -1
	return nil
}
