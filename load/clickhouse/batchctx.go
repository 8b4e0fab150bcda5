package clickhouse

import (
	"context"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// guardedConn is clickhouse-go's connection pool with every batch's context
// guarded (see batchContext). Everything but PrepareBatch passes through.
type guardedConn struct{ driver.Conn }

func (g guardedConn) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	bc := newBatchContext(ctx)
	b, err := g.Conn.PrepareBatch(bc, query, opts...)
	if err != nil {
		bc.finish()
		return nil, err
	}
	return &guardedBatch{Batch: b, ctx: bc}, nil
}

// guardedBatch finishes its context once the INSERT is over, whichever way.
type guardedBatch struct {
	driver.Batch
	ctx *batchContext
}

func (b *guardedBatch) Send() error {
	defer b.ctx.finish()
	return b.Batch.Send()
}

func (b *guardedBatch) Abort() error {
	defer b.ctx.finish()
	return b.Batch.Abort()
}

func (b *guardedBatch) Close() error {
	defer b.ctx.finish()
	return b.Batch.Close()
}

// batchContext is the context a batch is prepared with: it is done when its
// parent is, but only until the batch is finished, after which it is never
// done.
//
// clickhouse-go's Batch.Send starts a goroutine that closes the batch's TCP
// connection when the batch's context is done, and tells it to stop when
// Send returns. The goroutine selects between the two; when it first runs
// after both have happened, as on a busy machine after a caller returns from
// Send and cancels its context.WithTimeout at once, Go picks either, and
// half the time it closes a connection that is already back in the pool. The
// next statement to take that connection fails with "use of closed network
// connection" (seen as a sync failing to read its lease). A context that
// cannot become done once the batch is finished closes that window, while a
// cancellation during the batch still interrupts it.
type batchContext struct {
	parent context.Context
	stop   func() bool
	done   chan struct{}

	mu       sync.Mutex
	err      error
	finished bool
}

func newBatchContext(parent context.Context) *batchContext {
	c := &batchContext{parent: parent, done: make(chan struct{})}
	c.stop = context.AfterFunc(parent, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.finished {
			c.err = parent.Err()
			close(c.done)
		}
	})
	return c
}

// finish makes the context never done from now on, unless it already is.
func (c *batchContext) finish() {
	c.stop()
	c.mu.Lock()
	c.finished = true
	c.mu.Unlock()
}

// Deadline is the parent's: clickhouse-go sets it on the connection for the
// length of each call and clears it afterwards.
func (c *batchContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }

func (c *batchContext) Done() <-chan struct{} { return c.done }

func (c *batchContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *batchContext) Value(key any) any { return c.parent.Value(key) }
