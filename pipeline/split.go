package pipeline

import (
	"errors"
)

// confine keeps a failure that one variable may have caused with that
// variable, so that one bad variable does not fail up to
// VariablesPerRequest others every cycle. When the source ties the failure
// to one variable (a frame it could not decode, a rejection naming it),
// that variable fails and the others are asked for again without it. When
// it only says a variable may have caused it (a 404 for a variable deleted
// since the walk, a 400, a 403 on one device), the request is split in
// halves until the failure is confined. It returns false, and does
// nothing, for a failure of the whole request or of a single variable.
func (p *pass) confine(req *request, err error) bool {
	if len(req.targets) < 2 {
		return false
	}
	var parts [][]*targetState
	var ve VariableError
	if errors.As(err, &ve) && ve.VariableIndex() >= 0 && ve.VariableIndex() < len(req.targets) {
		i := ve.VariableIndex()
		p.mu.Lock()
		if bad := req.targets[i]; bad.err == nil {
			bad.err = err
		}
		p.mu.Unlock()
		parts = [][]*targetState{append(append([]*targetState(nil), req.targets[:i]...), req.targets[i+1:]...)}
	} else if IsNotFound(err) || IsScoped(err) {
		half := len(req.targets) / 2
		parts = [][]*targetState{req.targets[:half:half], req.targets[half:]}
	} else {
		return false
	}
	p.mu.Lock()
	for _, part := range parts {
		for _, t := range part {
			t.pending++
		}
	}
	for _, t := range req.targets {
		p.releaseLocked(t)
	}
	p.mu.Unlock()
	for _, part := range parts {
		p.q.push(&request{targets: part, start: req.start, end: req.end, open: req.open})
	}
	return true
}

func (p *pass) failRequest(req *request, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range req.targets {
		if t.err == nil {
			t.err = err
		}
		p.releaseLocked(t)
	}
}

// finishRequest releases the request's hold on its targets and queues the
// reads that the frames the limit cut left: the two ends of the window
// those frames did not prove whole (see remainder), or, when they proved
// nothing, its halves. An open request's last read is open, so the future
// beyond end is read once, with it. An open request of one millisecond
// that is cut cannot be halved: its millisecond is read closed, and the
// future it hid is noted as starting after end, which makes the next cycle
// read the variable again.
func (p *pass) finishRequest(req *request, cuts []cutFrame) {
	p.mu.Lock()
	if len(cuts) > 0 {
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
			next = append(next, p.remainderReads(req, proven)...)
		}
		if len(whole) > 0 {
			next = append(next, p.halves(req, whole)...)
		}
		for _, r := range next {
			for _, t := range r.targets {
				t.pending++
			}
		}
		p.splits.Add(1)
		// The reads are pushed after unlocking; pending counts them now
		// so that no target completes in between. They go to the front
		// of the queue: finishing the variables already started before
		// starting others lets their marks be committed as the run goes,
		// so a run stopped midway (SIGTERM, a crash) keeps that progress.
		defer func() {
			for i := len(next) - 1; i >= 0; i-- {
				p.q.pushFront(next[i])
			}
		}()
	}
	for _, t := range req.targets {
		p.releaseLocked(t)
	}
	p.mu.Unlock()
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
func (p *pass) remainderReads(req *request, cuts []cutFrame) []*request {
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
			// them is the earliest the frame showed, or after the window.
			for _, c := range group {
				c.t.futureMs = earliest(c.t.futureMs, earliest(c.stats.futureSeen, k.hi+1))
			}
		}
		targets := targetsOf(group)
		for _, w := range remainder(req.start, req.end, req.seriesEnd(), req.open, p.e.opts.RowsPerRequest, k.lo, k.hi, group) {
			next = append(next, &request{targets: targets, start: w.start, end: w.end, open: w.open})
		}
	}
	return next
}

// halves are the reads of req's window, in halves, for cut frames nothing
// proved. Caller holds p.mu.
func (p *pass) halves(req *request, cuts []cutFrame) []*request {
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
