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
// halves of every frame that the limit cut. An open request's halves are a
// closed one and an open one, so the future beyond end is read once, with
// the later half. An open request of one millisecond that is cut cannot be
// halved: its millisecond is read closed, and the future it hid is noted as
// starting after end, which makes the next cycle read the variable again.
func (p *pass) finishRequest(req *request, cut []*targetState) {
	p.mu.Lock()
	if len(cut) > 0 {
		var first, second *request
		switch {
		case req.start < req.end:
			mid := req.start + (req.end-req.start)/2
			first = &request{targets: cut, start: req.start, end: mid}
			second = &request{targets: cut, start: mid + 1, end: req.end, open: req.open}
		default: // an open request of one millisecond; a closed one is never cut
			first = &request{targets: cut, start: req.start, end: req.end}
			for _, t := range cut {
				t.futureMs = earliest(t.futureMs, req.end+1)
			}
		}
		for _, t := range cut {
			t.pending++
			if second != nil {
				t.pending++
			}
		}
		p.splits.Add(1)
		// The halves are pushed after unlocking; pending counts them now
		// so that no target completes in between. They go to the front
		// of the queue: finishing the variables already started before
		// starting others lets their marks be committed as the run goes,
		// so a run stopped midway (SIGTERM, a crash) keeps that progress.
		defer func() {
			if second != nil {
				p.q.pushFront(second)
			}
			p.q.pushFront(first)
		}()
	}
	for _, t := range req.targets {
		p.releaseLocked(t)
	}
	p.mu.Unlock()
}
