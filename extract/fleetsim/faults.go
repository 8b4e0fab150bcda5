package fleetsim

import (
	"math/rand"
)

// SetFaults replaces the injected faults; the zero Faults turns them off.
// Invalid rates are clamped to [0, 1].
func (s *Sim) SetFaults(f Faults) {
	clamp := func(x float64) float64 { return min(max(x, 0), 1) }
	f.ErrorRate, f.RateLimitRate, f.CutRate, f.SlowRate = clamp(f.ErrorRate), clamp(f.RateLimitRate), clamp(f.CutRate), clamp(f.SlowRate)
	f.Latency, f.SlowHeaders = max(f.Latency, 0), max(f.SlowHeaders, 0)
	s.setFaults(f)
}

func (s *Sim) setFaults(f Faults) {
	f = f.clone()
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.faults = f
	s.faultRand = rand.New(rand.NewSource(f.Seed))
}

// CurrentFaults returns the faults in force.
func (s *Sim) CurrentFaults() Faults {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.faults.clone()
}

// clone copies f with its own id lists.
func (f Faults) clone() Faults {
	f.Variables = append([]string(nil), f.Variables...)
	f.UndecodableVariables = append([]string(nil), f.UndecodableVariables...)
	f.RejectVariables = append([]string(nil), f.RejectVariables...)
	return f
}
