package fleetapi

import "runtime"

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
