package fleetsim

// Counters returns how many requests were answered, keyed by
// "METHOD endpoint-pattern status", e.g. "POST /api/v1.6/data/raw/series 200".
// Responses cut by a fault are also counted under "cut METHOD pattern".
func (s *Sim) Counters() map[string]int {
	s.counterMu.Lock()
	defer s.counterMu.Unlock()
	out := make(map[string]int, len(s.counters))
	for k, v := range s.counters {
		out[k] = v
	}
	return out
}

// RowsServed returns how many points the raw-series responses carried
// since start or the last ResetCounters: a row of a per-variable frame is
// one point, a row of a joined frame one per variable with a value in it.
// A response cut by a fault or left by its client counts what was written
// into it; a benchmark compares it with the points a client loaded.
func (s *Sim) RowsServed() int64 { return s.rowsServed.Load() }

// ResetCounters sets every counter back to zero, RowsServed too.
func (s *Sim) ResetCounters() {
	s.counterMu.Lock()
	defer s.counterMu.Unlock()
	s.counters = map[string]int{}
	s.rowsServed.Store(0)
}

func (s *Sim) count(key string) {
	s.counterMu.Lock()
	s.counters[key]++
	s.counterMu.Unlock()
}
