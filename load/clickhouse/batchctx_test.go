package clickhouse

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

func TestBatchContextIsCancelledWithItsParentUntilFinished(t *testing.T) {
	type key struct{}
	deadline := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), deadline)
	c := newBatchContext(parent)
	if d, ok := c.Deadline(); !ok || !d.Equal(deadline) || c.Value(key{}) != "v" {
		t.Fatalf("the batch context lost its parent's deadline or values: %v %v %v", d, ok, c.Value(key{}))
	}
	cancel()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the parent of an unfinished batch did not reach the batch")
	}
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err() = %v, want context.Canceled", c.Err())
	}
	c.finish() // a finished batch keeps the cancellation it saw
	if c.Err() == nil {
		t.Fatal("finish erased a cancellation that had already happened")
	}

	parent, cancel = context.WithCancel(context.Background())
	c = newBatchContext(parent)
	c.finish()
	cancel()
	// The AfterFunc is stopped by finish, and would find the batch finished
	// if it had started: either way Done stays open.
	time.Sleep(10 * time.Millisecond)
	select {
	case <-c.Done():
		t.Fatal("cancelling the parent of a finished batch reached it")
	default:
	}
	if c.Err() != nil {
		t.Fatalf("Err() = %v after the batch finished, want nil", c.Err())
	}
}

// Each write below is a batch whose context is cancelled right after Send
// returns, as Retry and Begin do, and each is followed by a read on the
// one pooled connection. Without the guard, clickhouse-go's Send watchdog
// could close that connection after it was back in the pool, and the read
// failed with "use of closed network connection" (a sync failing to read
// its lease, found by the idle-fleet benchmark).
func TestACancelAfterSendNeverClosesThePooledConnection(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), func(cfg *Config) { cfg.MaxOpenConns = 1 })
	ctx := context.Background()
	// Goroutines that keep every P busy delay the watchdog goroutine past
	// Send's return, as a loaded machine does.
	stop := make(chan struct{})
	defer close(stop)
	for range runtime.GOMAXPROCS(0) {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	for i := range 150 {
		var b pipeline.Batch
		b.Append(pipeline.Row{VariableID: "v", DeviceID: "d", TsMs: int64(i), Value: 1, Context: "{}"})
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := c.insertPoints(wctx, []*pipeline.Batch{&b}, c.NextVersion(), nil, scratchPool.Get().(*scratch))
		cancel()
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		var n uint64
		if err := c.Conn().QueryRow(ctx, "SELECT count() FROM "+c.Table(TableDatapoints)).Scan(&n); err != nil {
			t.Fatalf("read after write %d: %v", i, err)
		}
		if n != uint64(i+1) {
			t.Fatalf("after write %d: %d rows, want %d", i, n, i+1)
		}
	}
}
