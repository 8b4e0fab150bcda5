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

// ResetCounters sets every counter back to zero.
func (s *Sim) ResetCounters() {
	s.counterMu.Lock()
	defer s.counterMu.Unlock()
	s.counters = map[string]int{}
}

func (s *Sim) count(key string) {
	s.counterMu.Lock()
	s.counters[key]++
	s.counterMu.Unlock()
}
