package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The fleet's metadata as the sync stores it beside the points: the
// snapshot a cycle's walk gives, the groups, organizations and event logs
// the metadata stages read, and how their partial failures are reported.

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

// EventLog is one entry of an event's log history.
type EventLog struct {
	// Event is the event's key as configured (an id or a ~label): the
	// service has no event listing, so the configured key names the event.
	Event     string
	ID        string
	CreatedAt time.Time
	// Raw is the whole log object as compact JSON text: the service does not
	// document its fields beyond id and createdAt, so nothing is dropped.
	Raw json.RawMessage
}

// EventMark is the high-water mark of one event's logs.
type EventMark struct {
	Event string
	// CreatedAtUs is the greatest createdAt loaded, POSIX microseconds.
	CreatedAtUs int64
	// IDs are the logs loaded whose createdAt equals CreatedAtUs, so that a
	// log with the same createdAt that shows up later is still loaded while
	// those already loaded are not loaded again.
	IDs []string
}

// WalkMetadata is the metadata stage of a plain MetadataWriter: each
// part of a cycle's walk stored as it is, nothing marked deleted, no
// groups, organizations or events.
func WalkMetadata(w MetadataWriter) SnapshotWriter { return walkMetadata{w} }

type walkMetadata struct{ w MetadataWriter }

func (m walkMetadata) BeginSnapshot(_ context.Context, _ bool, at time.Time) (SnapshotRun, error) {
	return walkMetadataRun{w: m.w, at: at}, nil
}

type walkMetadataRun struct {
	w  MetadataWriter
	at time.Time
}

func (m walkMetadataRun) Devices(ctx context.Context, devices []Device) error {
	if err := m.w.WriteDevices(ctx, devices, m.at); err != nil {
		return fmt.Errorf("store device metadata: %w", err)
	}
	return nil
}

func (m walkMetadataRun) Variables(ctx context.Context, vars []Variable) error {
	if err := m.w.WriteVariables(ctx, vars, m.at); err != nil {
		return fmt.Errorf("store variable metadata: %w", err)
	}
	return nil
}

func (walkMetadataRun) Finish(context.Context) error { return nil }

// MetadataError reports the parts of the fleet's metadata (groups,
// organizations, event logs, deletion flags) a cycle could not refresh while
// devices and variables were stored. The cycle still syncs the points and
// returns this error at its end.
type MetadataError struct {
	Errs []error
}

func (e *MetadataError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return "fleet metadata only partly refreshed (the points were synced): " + strings.Join(msgs, "; ")
}

// Unwrap gives the individual failures.
func (e *MetadataError) Unwrap() []error { return e.Errs }

// PermissionError is implemented by the source's error for a valid token
// that may not read a resource (HTTP 403 without a retention code).
type PermissionError interface {
	error
	PermissionDenied() bool
}

// IsPermissionDenied reports whether err says the token may not read the
// resource (as opposed to a range past retention, also a 403).
func IsPermissionDenied(err error) bool {
	var p PermissionError
	return errors.As(err, &p) && p.PermissionDenied() && !IsRetention(err)
}

// StoredRef names a live row of the devices or variables table.
type StoredRef struct {
	ID string
	// DeviceID is a variable's device ("" for a device).
	DeviceID string
}

// MetadataDiff is what storing a walk's devices or variables change by
// change did.
type MetadataDiff struct {
	// Written is how many rows were written: the objects whose live row
	// was missing (new, or marked deleted before) or differed.
	Written int
	// Missing are the live rows the walk did not have: deleted in the
	// source, or out of a scoped walk.
	Missing []StoredRef
}
