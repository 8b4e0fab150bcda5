package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/fleetsync/fleetsync/pipeline"
)

// fakeLease records what its holder did with it; Renew fails with renewErr.
type fakeLease struct {
	mu       sync.Mutex
	renews   int
	released bool
	renewErr error
}

func (l *fakeLease) Holder() string     { return "test" }
func (l *fakeLease) Expires() time.Time { return time.Now().Add(time.Minute) }

func (l *fakeLease) Renew(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renews++
	return l.renewErr
}

func (l *fakeLease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released = true
	return nil
}

type fakeLeaser struct {
	lease *fakeLease
	err   error
}

func (f *fakeLeaser) Acquire(context.Context, string, time.Duration) (pipeline.Lease, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.lease, nil
}

func TestOnceStopsTheCycleWhenTheLeaseIsLostAndReleasesIt(t *testing.T) {
	lease := &fakeLease{renewErr: fmt.Errorf("renew: %w", pipeline.ErrLeaseLost)}
	r := New(&fakeLeaser{lease: lease}, "test", 3*time.Second, nil)
	var cause error
	err := r.Once(context.Background(), func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return errors.New("the cycle was not stopped within 30s of losing the lease")
		}
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(cause, pipeline.ErrLeaseLost) {
		t.Fatalf("Once = %v with cause %v; want the cycle cancelled because the lease was lost", err, cause)
	}
	lease.mu.Lock()
	defer lease.mu.Unlock()
	if lease.renews != 1 || !lease.released {
		t.Fatalf("%d renewals, released %v; want 1 renewal (the one that found it lost) and the lease released", lease.renews, lease.released)
	}
}

func TestOnceRenewsAndReleasesTheLeaseOfAGoodCycle(t *testing.T) {
	lease := &fakeLease{}
	r := New(&fakeLeaser{lease: lease}, "test", 3*time.Second, nil)
	err := r.Once(context.Background(), func(ctx context.Context) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			lease.mu.Lock()
			n := lease.renews
			lease.mu.Unlock()
			if n >= 2 {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d renewals in 30s, want 2", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err != nil || !lease.released {
		t.Fatalf("Once = %v, released %v; want nil and released", err, lease.released)
	}
}

func TestOnceSaysAnotherSyncHoldsTheLeaseAndRunsNothing(t *testing.T) {
	r := New(&fakeLeaser{err: fmt.Errorf("held by host/42: %w", pipeline.ErrLeaseHeld)}, "test", time.Minute, nil)
	ran := false
	err := r.Once(context.Background(), func(context.Context) error { ran = true; return nil })
	if ran || err == nil || !errors.Is(err, pipeline.ErrLeaseHeld) || !strings.Contains(err.Error(), "another fleetsync is syncing this database") {
		t.Fatalf("Once with the lease held = %v (cycle ran: %v); want the holder named with the next step and no cycle", err, ran)
	}
	err = New(&fakeLeaser{err: errors.New("connection refused")}, "test", time.Minute, nil).Once(context.Background(), func(context.Context) error { return nil })
	if err == nil || !strings.HasPrefix(err.Error(), "acquire the sync lease: ") {
		t.Fatalf("Once with a failing store = %v; want it named as the lease's", err)
	}
}

// Shutdown order: once the signal comes, no cycle starts, and Run returns
// only after the running one has finished (committed what it fetched).
func TestRunFinishesTheRunningCycleAndStartsNoOtherAfterTheSignal(t *testing.T) {
	r := New(&fakeLeaser{lease: &fakeLease{}}, "test", time.Minute, nil)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var cycles, finished atomic.Int32
	go func() {
		<-started
		cancel()
	}()
	r.Run(ctx, cron.ConstantDelaySchedule{Delay: time.Second}, true, func(ctx context.Context) {
		if cycles.Add(1) == 1 {
			close(started)
		}
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // loading and committing what was fetched
		finished.Add(1)
	})
	if cycles.Load() != 1 || finished.Load() != 1 {
		t.Fatalf("Run returned with %d cycles started and %d finished; want the initial one, finished", cycles.Load(), finished.Load())
	}
}

func TestRunWithoutTheInitialCycleWaitsForTheSchedule(t *testing.T) {
	r := New(&fakeLeaser{lease: &fakeLease{}}, "test", time.Minute, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var cycles atomic.Int32
	r.Run(ctx, cron.ConstantDelaySchedule{Delay: time.Hour}, false, func(context.Context) { cycles.Add(1) })
	if cycles.Load() != 0 {
		t.Fatalf("%d cycles ran before the first scheduled time", cycles.Load())
	}
}
