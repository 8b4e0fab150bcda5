package fleetapi

import (
	"errors"
	"runtime"
)

// testingAllocs measures the heap allocations of one call.
type testingAllocs struct{ bytes, allocs float64 }

func (t *testingAllocs) measure(f func()) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	t.bytes = float64(after.TotalAlloc - before.TotalAlloc)
	t.allocs = float64(after.Mallocs - before.Mallocs)
}

// The pipeline reads a source's errors by their methods (Retryable,
// NotFound, VariableScoped, VariableIndex), found anywhere in the chain, and
// never imports this package; the tests read them the same way.
func retryableByMethod(err error) bool {
	var r interface{ Retryable() bool }
	return errors.As(err, &r) && r.Retryable()
}

func notFoundByMethod(err error) bool {
	var r interface{ NotFound() bool }
	return errors.As(err, &r) && r.NotFound()
}

func scopedByMethod(err error) bool {
	var r interface{ VariableScoped() bool }
	return errors.As(err, &r) && r.VariableScoped()
}

// variableError is how the pipeline sees an error tied to one variable of a
// request.
type variableError interface {
	error
	VariableIndex() int
}
