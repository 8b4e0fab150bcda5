package pipeline

import (
	"context"
	"sync"

	"github.com/cenkalti/backoff/v4"
)

// request is one raw-series request over [start, end]. An open request
// reaches futureHorizon past end: the rows beyond end are not loaded, only
// noted (targetState.futureMs).
type request struct {
	targets []*targetState
	start   int64
	end     int64
	open    bool
	attempt int
	// backoff spaces the re-reads of a response that failed mid-stream.
	backoff backoff.BackOff
	// halves is shared by the two requests a response too large was split
	// into by variables (reader.shrink), nil otherwise.
	halves *splitHalves
}

// seriesEnd is the end the request sends.
func (q *request) seriesEnd() int64 {
	if q.open {
		return q.end + futureHorizon.Milliseconds()
	}
	return q.end
}

// queue is the work list of requests. Splits add work while fetchers run, so
// it closes only when nothing is queued and nothing is being worked on.
type queue struct {
	mu          sync.Mutex
	cond        *sync.Cond
	items       []*request
	outstanding int
	adding      bool
	cancelled   bool
}

func newQueue(ctx context.Context) *queue {
	q := &queue{adding: true}
	q.cond = sync.NewCond(&q.mu)
	context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.cancelled = true
		q.mu.Unlock()
		q.cond.Broadcast()
	})
	return q
}

func (q *queue) push(r *request) {
	q.mu.Lock()
	q.items = append(q.items, r)
	q.outstanding++
	q.mu.Unlock()
	q.cond.Signal()
}

// pushFront queues r before every queued request.
func (q *queue) pushFront(r *request) {
	q.mu.Lock()
	q.items = append([]*request{r}, q.items...)
	q.outstanding++
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *queue) doneAdding() {
	q.mu.Lock()
	q.adding = false
	q.mu.Unlock()
	q.cond.Broadcast()
}

// pop returns the next request, or nil when the work is finished or the
// context cancelled. Every non-nil pop must be followed by done. The
// fetcher takes its turn (turns.go) before it looks, and again each time
// it wakes, the lock released meanwhile.
func (q *queue) pop(ctx context.Context) *request {
	t := turnOf(ctx)
	if t != nil {
		t()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && (q.outstanding > 0 || q.adding) && !q.cancelled {
		q.cond.Wait()
		if t != nil {
			q.mu.Unlock()
			t()
			q.mu.Lock()
		}
	}
	// ctx is asked too: the flag is set by a goroutine of its own, so that
	// a pop right after the cancellation could still hand out a request.
	if len(q.items) == 0 || q.cancelled || ctx.Err() != nil {
		return nil
	}
	r := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return r
}

// done marks one popped request finished; a request re-queued before done
// keeps the queue open.
func (q *queue) done() {
	q.mu.Lock()
	q.outstanding--
	if q.outstanding <= 0 {
		q.cond.Broadcast()
	}
	q.mu.Unlock()
}

// drain takes every request still queued: once a cancelled run's fetchers
// have stopped, nothing else will.
func (q *queue) drain() []*request {
	q.mu.Lock()
	defer q.mu.Unlock()
	left := q.items
	q.items = nil
	q.outstanding -= len(left)
	return left
}
