package metadata

import (
	"context"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// The ports of the metadata stages: what a source (RefreshSource,
// EventSource), a warehouse (Writer, RefreshStore, EventLogWriter) and a
// state store (EventMarkStore) implement for them, grouped by who
// implements it as pipeline/ports.go groups the engine's. All of them are
// optional: cmd wires a Refresh and an EventSync only for adapters that
// implement them (docs/architecture.md, "Plugging in something new").

// What a source implements.

// RefreshSource is what the metadata refresh reads beyond the walk: the
// device list (to tell deleted devices), groups with their members, and
// organizations. Resolving groups and organizations to devices is the
// walk's too (a scoped walk), hence pipeline.ScopeResolver.
type RefreshSource interface {
	pipeline.ScopeResolver
	// Devices lists every device of the account (all pages).
	Devices(ctx context.Context, fn func(pipeline.Device) error) error
	// ListDeviceGroups lists every device group; Members is left empty
	// (GroupDeviceIDs gives them).
	ListDeviceGroups(ctx context.Context, fn func(DeviceGroup) error) error
	// ListOrganizations lists every organization. It needs an
	// organization- or account-scoped token; with an ordinary one it fails
	// with an error for which IsPermissionDenied is true.
	ListOrganizations(ctx context.Context, fn func(Organization) error) error
}

// EventSource lists an event's logs.
type EventSource interface {
	// ListEventLogs calls fn for the event's logs, page by page, following
	// the service's cursor. An error returned by fn stops the listing and
	// is returned wrapped.
	ListEventLogs(ctx context.Context, event string, fn func(EventLog) error) error
}

// What a warehouse implements.

// Writer stores the metadata snapshot of each cycle as it is (see Plain).
type Writer interface {
	WriteDevices(ctx context.Context, devices []pipeline.Device, syncedAt time.Time) error
	WriteVariables(ctx context.Context, vars []pipeline.Variable, syncedAt time.Time) error
}

// RefreshStore is the warehouse side of the metadata refresh.
type RefreshStore interface {
	Writer
	// LiveDevices returns the organization id (maybe empty) of every device
	// not marked deleted, by device id.
	LiveDevices(ctx context.Context) (map[string]string, error)
	// WriteChangedDevices stores the devices whose live row is missing or
	// differs from what WriteDevices would write, and returns the live
	// rows the list lacks. An unchanged device costs no row, so a cycle
	// in which nothing changed writes none.
	WriteChangedDevices(ctx context.Context, devices []pipeline.Device, syncedAt time.Time) (Diff, error)
	// ChangedVariables starts storing one walk's variables change by
	// change, as WriteChangedDevices does devices, but a part of the walk
	// at a time: the stored rows are compared in a compact form (a few
	// integers a row), so that memory does not hold the fleet twice.
	ChangedVariables(ctx context.Context, syncedAt time.Time) (VariableChanges, error)
	// MarkDevicesDeleted and MarkVariablesDeleted flag the stored rows of
	// ids as deleted in the source; their points stay.
	MarkDevicesDeleted(ctx context.Context, ids []string) error
	MarkVariablesDeleted(ctx context.Context, ids []string) error
	// WriteOrganizations stores the complete list of organizations; those
	// stored before and missing from it are marked deleted.
	WriteOrganizations(ctx context.Context, orgs []Organization, syncedAt time.Time) error
	// WriteDeviceGroups stores the complete list of groups with their
	// members: groups missing from it are marked deleted, and memberships
	// missing from it are marked removed.
	WriteDeviceGroups(ctx context.Context, groups []DeviceGroup, syncedAt time.Time) error
}

// VariableChanges stores one walk's variables change by change (see
// RefreshStore.ChangedVariables).
type VariableChanges interface {
	// Write stores the variables whose live row, as it was when the walk
	// began or as an earlier Write of the walk left it, is missing or
	// differs from what WriteVariables would write, and returns how many
	// those were. A variable with no live row when the walk began is
	// written each time it is given (the rows are alike). It may hold them
	// back to write them together, until Missing.
	Write(ctx context.Context, vars []pipeline.Variable) (written int, err error)
	// Missing writes what Write held back, then returns the live rows (as
	// they were when the walk began) of variables no Write was given,
	// each with its device. It is called once the walk is complete.
	Missing(ctx context.Context) ([]StoredRef, error)
}

// EventLogWriter stores event logs in the warehouse.
type EventLogWriter interface {
	// WriteEventLogs stores logs; a log written again replaces itself
	// (one row per event and log id once deduplicated).
	WriteEventLogs(ctx context.Context, logs []EventLog) error
}

// What a state store implements.

// EventMarkStore keeps the events' marks (state.ClickHouse). Like the
// variables' marks, an event's mark is committed only after the logs below
// it were stored.
type EventMarkStore interface {
	// EventMarks returns the stored marks by event key.
	EventMarks(ctx context.Context) (map[string]EventMark, error)
	// CommitEventMark stores the event's new mark.
	CommitEventMark(ctx context.Context, mark EventMark) error
}
