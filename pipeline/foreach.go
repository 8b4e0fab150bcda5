package pipeline

import (
	"context"
	"fmt"
	"sync"
)

// ForEach runs fn(0..n-1) with at most limit at once and returns the errors
// (nil entries for successes, one per index). The metadata walk and verify
// use it to keep a bounded number of API requests in flight.
func ForEach(ctx context.Context, n, limit int, fn func(i int) error) []error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(1, limit))
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errs
}

// SideBySide runs a and b concurrently and returns both failures as one
// error on one line (a's first), as every error the CLI prints: for two
// independent writes whose failures both matter, such as two derived
// tables, or two halves of a commit's variables.
func SideBySide(a, b func() error) error {
	var aErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		aErr = a()
	}()
	bErr := b()
	<-done
	switch {
	case aErr != nil && bErr != nil:
		return fmt.Errorf("%w; %w", aErr, bErr)
	case aErr != nil:
		return aErr
	}
	return bErr
}
