package pipeline

// The re-reads that cut frames leave. A frame of `limit` rows may have
// been cut (density.go); what the proofs left unproven is read again here,
// as requests the reader queues in front of the others. These functions
// plan; they touch the targets only to note the future an open request
// can no longer read, and their caller holds the reader's lock.

// rereads are the reads that the frames the limit cut in req leave: the
// two ends of the window those frames did not prove whole (see
// remainder), or, when they proved nothing, its halves. An open request's
// last read is open, so the future beyond end is read once, with it. An
// open request of one millisecond that is cut cannot be halved: its
// millisecond is read closed, and the future it hid is noted as starting
// after end, which makes the next cycle read the variable again.
func rereads(req *request, cuts []cutFrame, limit int) []*request {
	var proven, whole []cutFrame
	for _, c := range cuts {
		if c.inner {
			proven = append(proven, c)
		} else {
			whole = append(whole, c)
		}
	}
	var next []*request
	if len(proven) > 0 {
		next = append(next, remainderReads(req, proven, limit)...)
	}
	if len(whole) > 0 {
		next = append(next, halves(req, whole)...)
	}
	return next
}

func targetsOf(cuts []cutFrame) []*targetState {
	ts := make([]*targetState, len(cuts))
	for i, c := range cuts {
		ts[i] = c.t
	}
	return ts
}

// remainderReads are the reads of the ends of req's window left by cut
// frames whose counts proved an inner window whole. Frames proven by the
// same window share their reads; each other window plans its own, so a
// frame's re-reads never depend on which other frames shared its request,
// or in which order.
func remainderReads(req *request, cuts []cutFrame, limit int) []*request {
	type inner struct{ lo, hi int64 }
	var order []inner
	byWindow := map[inner][]cutFrame{}
	for _, c := range cuts {
		k := inner{c.innerLo, c.innerHi}
		if _, ok := byWindow[k]; !ok {
			order = append(order, k)
		}
		byWindow[k] = append(byWindow[k], c)
	}
	var next []*request
	for _, k := range order {
		group := byWindow[k]
		if req.open && k.hi >= req.end && k.hi < req.seriesEnd() {
			// The points past the proven window are all ahead of the
			// cycle and are not read (see remainder): the earliest of
			// them is after the window (the frame's own are noted).
			for _, c := range group {
				c.t.futureMs = earliest(c.t.futureMs, k.hi+1)
			}
		}
		targets := targetsOf(group)
		for _, w := range remainder(req.start, req.end, req.seriesEnd(), req.open, limit, k.lo, k.hi, group) {
			next = append(next, &request{targets: targets, start: w.start, end: w.end, open: w.open})
		}
	}
	return next
}

// halves are the reads of req's window, in halves, for cut frames nothing
// proved.
func halves(req *request, cuts []cutFrame) []*request {
	targets := targetsOf(cuts)
	if req.start < req.end {
		mid := req.start + (req.end-req.start)/2
		return []*request{{targets: targets, start: req.start, end: mid}, {targets: targets, start: mid + 1, end: req.end, open: req.open}}
	}
	// An open request of one millisecond; a closed one is never cut.
	for _, t := range targets {
		t.futureMs = earliest(t.futureMs, req.end+1)
	}
	return []*request{{targets: targets, start: req.start, end: req.end}}
}
