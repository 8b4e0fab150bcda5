package fleetsim

import (
	"fmt"
	"strings"
)

// LastActivityMode is a reading of the spec's lastActivity of devices and
// variables ("integer, POSIX milliseconds", nothing more). The spec does not
// say which instant it is, so the simulator offers the plausible readings and
// clients can be tested against each.
type LastActivityMode int

// The readings of lastActivity. A device's lastActivity is the greatest of
// its variables', null when none of them has one.
const (
	// LastActivityAnyWrite is the write time of the latest write of any
	// point, a late point behind the newest included (the default).
	LastActivityAnyWrite LastActivityMode = iota
	// LastActivityNewestWrite is the write time of the point with the
	// newest timestamp: a late point written behind the newest does not
	// move it.
	LastActivityNewestWrite
	// LastActivityNewestTs is the newest point's own timestamp, which lies
	// in the future for a device whose clock runs ahead.
	LastActivityNewestTs
	// LastActivityNone renders lastActivity as null everywhere.
	LastActivityNone
)

// String spells the mode as ParseLastActivityMode and the --last-activity
// flag read it.
func (m LastActivityMode) String() string {
	switch m {
	case LastActivityNewestWrite:
		return "newest-write"
	case LastActivityNewestTs:
		return "newest-ts"
	case LastActivityNone:
		return "none"
	case LastActivityAnyWrite:
		return "any-write"
	}
	return fmt.Sprintf("LastActivityMode(%d)", int(m))
}

// ParseLastActivityMode reads a mode spelled "any-write", "newest-write",
// "newest-ts" or "none".
func ParseLastActivityMode(s string) (LastActivityMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "any-write":
		return LastActivityAnyWrite, nil
	case "newest-write":
		return LastActivityNewestWrite, nil
	case "newest-ts":
		return LastActivityNewestTs, nil
	case "none":
		return LastActivityNone, nil
	}
	return 0, fmt.Errorf("last activity mode %q: want any-write, newest-write, newest-ts or none", s)
}

// varActivity is the variable's lastActivity under the configured mode; ok
// is false when it is null. Caller holds s.mu.
func (s *Sim) varActivity(v *variable) (ms int64, ok bool) {
	switch s.opts.LastActivity {
	case LastActivityNone:
		return 0, false
	case LastActivityNewestWrite:
		c := v.ser.cursor(minTs, maxTs)
		if !c.next() {
			return 0, false
		}
		return c.createdAt(), true
	case LastActivityNewestTs:
		return v.ser.newestTs()
	}
	return v.lastWrite, v.written
}

// deviceActivity is the greatest lastActivity of the device's variables; ok
// is false when none has one. Caller holds s.mu.
func (s *Sim) deviceActivity(d *device) (ms int64, ok bool) {
	for _, v := range d.vars {
		if a, has := s.varActivity(v); has && (!ok || a > ms) {
			ms, ok = a, true
		}
	}
	return ms, ok
}

// noteWrite records that a point of v was written at nowMs. Caller holds
// the write lock.
func (v *variable) noteWrite(nowMs int64) {
	if !v.written || nowMs > v.lastWrite {
		v.lastWrite = nowMs
	}
	v.written = true
}

// activityJSON renders a lastActivity: the milliseconds, or null.
func activityJSON(ms int64, ok bool) any {
	if !ok {
		return nil
	}
	return ms
}
