package fleetapi

// results decodes `results` now that the columns are known.
func (d *seriesDecoder) results() error {
	if d.joined {
		return d.joinedResults()
	}
	k := 0
	err := arrayElements(&d.s, "between frames", func() error {
		if k >= len(d.req.VariableIDs) {
			d.frame, d.row = -1, -1
			return d.fail("the response has more frames than the %d requested variables", len(d.req.VariableIDs))
		}
		d.frame = k
		if err := d.frameRows(k); err != nil {
			return err
		}
		d.row = -1
		k++
		return nil
	})
	if err != nil {
		return err
	}
	d.frame = -1
	if k != len(d.req.VariableIDs) {
		return d.fail("the response has %d frames for %d requested variables", k, len(d.req.VariableIDs))
	}
	return nil
}

// frameRows streams the rows of frame k into the sink.
func (d *seriesDecoder) frameRows(k int) error {
	fc := &d.frames[k]
	rows := 0
	more, err := d.s.firstElement()
	if more && (fc.ts < 0 || fc.val < 0) {
		return d.fail("frame %d has rows but its columns name no timestamp or no value.value", k)
	}
	for more && err == nil {
		d.row = rows
		if err := d.frameRow(k, fc); err != nil {
			return err
		}
		rows++
		more, err = d.s.nextElement("between rows")
	}
	if err != nil {
		return err
	}
	if err := d.sink.EndFrame(k, rows); err != nil {
		return &sinkError{err}
	}
	return nil
}

// frameRow decodes one row of a per-variable frame.
func (d *seriesDecoder) frameRow(k int, fc *frameCols) error {
	var (
		ts          int64
		val         float64
		tsOK, valOK bool
		at          position
	)
	d.ctx = append(d.ctx[:0], '{', '}')
	j := 0
	more, err := d.s.firstElement()
	for more && err == nil {
		switch j {
		case fc.ts:
			ts, tsOK, err = d.millisCell()
		case fc.val:
			val, valOK, err = d.floatCell()
		case fc.ctx:
			d.ctx, _, err = d.contextCell(d.ctx[:0], &at)
		default:
			err = d.s.walk(nil, 0)
		}
		if err != nil {
			return err
		}
		j++
		more, err = d.s.nextElement("between cells")
	}
	if err != nil {
		return err
	}
	if j != fc.n {
		return d.fail("row has %d cells but the frame's columns name %d", j, fc.n)
	}
	if !tsOK || !valOK {
		return nil
	}
	if err := d.checkTimestamp(ts); err != nil {
		return err
	}
	if err := d.sink.Point(k, at.point(ts, val, d.ctx)); err != nil {
		return &sinkError{err}
	}
	return nil
}

func (d *seriesDecoder) checkTimestamp(ts int64) error {
	if ts >= d.req.Start && ts <= d.req.End {
		return nil
	}
	hint := ""
	if ts > -1e11 && ts < 1e11 && d.req.Start >= 1e11 {
		hint = "; it reads like seconds, not milliseconds"
	}
	return d.fail("timestamp %d lies outside the requested range [%d, %d]%s", ts, d.req.Start, d.req.End, hint)
}
