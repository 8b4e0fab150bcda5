package metadata

import (
	"time"
)

// The fleet's metadata the refresh reads beyond the walk (groups and
// organizations), and what a store reports of a walk compared with its
// live rows. The walk's own Device and Variable are package pipeline's:
// the engine reads them too.

// DeviceGroup is a cluster of devices inside an organization, with its
// members as of one snapshot.
type DeviceGroup struct {
	ID, Label, Name, URL string
	// Organization is the owning organization's id.
	Organization string
	Tags         []string
	CreatedAt    time.Time
	// Members are the ids of the group's devices, from the group's device
	// listing (the authoritative membership).
	Members []string
}

// Organization is a sub-account of the fleet.
type Organization struct {
	ID, Label, Name, URL string
	CreatedAt            time.Time
}

// StoredRef names a live row of the devices or variables table.
type StoredRef struct {
	ID string
	// DeviceID is a variable's device ("" for a device).
	DeviceID string
}

// Diff is what storing a walk's devices or variables change by change
// did (RefreshStore.WriteChangedDevices).
type Diff struct {
	// Written is how many rows were written: the objects whose live row
	// was missing (new, or marked deleted before) or differed.
	Written int
	// Missing are the live rows the walk did not have: deleted in the
	// source, or out of a scoped walk.
	Missing []StoredRef
}
