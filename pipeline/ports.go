package pipeline

import (
	"context"
	"time"
)

// The ports: every interface an adapter implements for the sync, grouped
// by who implements it, so that a new source, warehouse or state store
// starts from this file. docs/architecture.md says which are needed for
// which command. Optional capabilities are fields of the options that
// take them (EngineOptions.Counts and Links, Stages.Metadata and Events),
// wired by cmd, never found by a type assertion.

// What a source implements. Series and Walk are the whole of what the
// engine reads; the rest are the metadata stage's (RefreshSource,
// EventSource) and one optional capability (CountSource). A source also
// classifies its errors with the interfaces of errors.go (retryable, past
// retention, not found, one variable's, permission, too large) and, for `fleetsync
// verify`, implements pipeline/verify's Source.

// Source is a telemetry service as the sync reads it: the Fleet Telemetry
// Service through extract/fleet, or any other that lists devices with
// their variables and serves windows of a variable's points.
type Source interface {
	// Walk lists the in-scope devices and their variables, handing them to
	// sink as it goes, so that no walk holds the whole fleet (see
	// WalkSink). Each variable carries its device's id and label.
	Walk(ctx context.Context, scope Scope, sink WalkSink) error
	// Series streams the raw series of req into sink. On an error, part
	// of the response may have reached the sink already (the engine
	// discards it and reads the window again); a TooLargeError only
	// before any of it has. Failures before the response (connection,
	// 429, 5xx) are the source's to retry within its own budget.
	Series(ctx context.Context, req SeriesRequest, sink FrameSink) error
}

// WalkSink takes a walk as the source lists it: Devices before the
// variables of those devices (it may be called again with devices the walk
// found later), then Variables a page or a device at a time. A variable may
// be handed again in one walk, when a listing had to start over; the sink
// takes it as the same variable seen twice. Calls come one at a time; the
// slices are the sink's, and an error stops the walk and is returned by it.
type WalkSink interface {
	Devices(ctx context.Context, devices []Device) error
	Variables(ctx context.Context, vars []Variable) error
}

// FrameSink receives a raw-series response frame by frame, in request order.
// Frame i belongs to SeriesRequest.VariableIDs[i].
type FrameSink interface {
	// Point is called once per non-null row of frame i.
	Point(i int, p Point) error
	// EndFrame is called after the last row of frame i with the number of
	// rows the frame held (null rows included), so the caller can tell a
	// frame cut by the limit.
	EndFrame(i int, rows int) error
}

// CountSource is the optional capability of a Source that can count
// points per variable over a window, with one request for several
// variables. Wired as EngineOptions.Counts, it lets the engine prove a
// frame of `limit` rows whole instead of reading its window again
// (density.go); without it cut frames are read again in halves.
type CountSource interface {
	// Count returns the number of points of each variable in [start, end]
	// (POSIX ms, inclusive), in the order of ids; -1 where the source gave
	// no count.
	Count(ctx context.Context, ids []string, start, end int64) ([]int64, error)
}

// ScopeResolver is the part of a Source that resolves group and organization
// scopes to device ids.
type ScopeResolver interface {
	GroupDeviceIDs(ctx context.Context, group string) ([]string, error)
	OrganizationDeviceIDs(ctx context.Context, org string) ([]string, error)
}

// RefreshSource is what the metadata refresh reads beyond the walk: the
// device list (to tell deleted devices), groups with their members, and
// organizations.
type RefreshSource interface {
	ScopeResolver
	// Devices lists every device of the account (all pages).
	Devices(ctx context.Context, fn func(Device) error) error
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

// What a warehouse implements: the streamed INSERTs of points (Writer,
// Insert), the links of the commit chain that keep tables derived from the
// points (Link, commit.go), the metadata tables
// (MetadataWriter, RefreshStore) and the event logs (EventLogWriter); for
// `fleetsync verify`, pipeline/verify's Warehouse.

// Writer loads points into the warehouse, one INSERT at a time, taking each
// INSERT's rows chunk by chunk: a chunk goes back to the engine's pool as
// soon as it is appended, so an INSERT can be large (fewer, bigger parts for
// the server to write and merge) while memory holds only the chunks in
// flight, not every row of the INSERT until it is acknowledged.
type Writer interface {
	// Begin opens an INSERT. It retries retryable failures to connect within
	// the writer's own budget; an error means that budget is spent or the
	// failure is permanent.
	Begin(ctx context.Context) (Insert, error)
}

// Insert is one open INSERT of a Writer. Its rows are acknowledged
// only by a successful Commit: after a failed Append or Commit, or an Abort,
// some of them may be stored and some not, which the ReplacingMergeTree
// version makes harmless once they are read again.
type Insert interface {
	// Append sends the chunk's rows; the caller may reuse the chunk as soon
	// as it returns.
	Append(chunk *Batch) error
	// Commit ends the INSERT and returns once the server has acknowledged
	// every row appended.
	Commit() error
	// Abort abandons the INSERT and releases its connection.
	Abort()
}

// MetadataWriter stores the metadata snapshot of each cycle.
type MetadataWriter interface {
	WriteDevices(ctx context.Context, devices []Device, syncedAt time.Time) error
	WriteVariables(ctx context.Context, vars []Variable, syncedAt time.Time) error
}

// SnapshotWriter is the metadata stage of a cycle (Stages.Metadata): it
// takes the cycle's walk as it comes, page by page, and once the walk is
// complete tells what was deleted and refreshes the rest of the fleet's
// metadata. *Refresh is the full one; WalkMetadata makes one of a plain
// MetadataWriter.
type SnapshotWriter interface {
	// BeginSnapshot starts storing one cycle's walk, taken at at; scoped
	// says a scope restricted it, so that a device missing from it may
	// merely be out of scope.
	BeginSnapshot(ctx context.Context, scoped bool, at time.Time) (SnapshotRun, error)
}

// SnapshotRun stores one walk as the walk hands it on (WalkSink).
type SnapshotRun interface {
	WalkSink
	// Finish is called once the walk is complete, and only then, so that
	// an interrupted walk never marks anything deleted: it stores what
	// needs the whole walk (deletions, groups, organizations).
	Finish(ctx context.Context) error
}

// RefreshStore is the warehouse side of the metadata refresh.
type RefreshStore interface {
	MetadataWriter
	// LiveDevices returns the organization id (maybe empty) of every device
	// not marked deleted, by device id.
	LiveDevices(ctx context.Context) (map[string]string, error)
	// WriteChangedDevices stores the devices whose live row is missing or
	// differs from what WriteDevices would write, and returns the live
	// rows the list lacks. An unchanged device costs no row, so a cycle
	// in which nothing changed writes none.
	WriteChangedDevices(ctx context.Context, devices []Device, syncedAt time.Time) (MetadataDiff, error)
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
	Write(ctx context.Context, vars []Variable) (written int, err error)
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

// What a state store implements: the marks (StateStore) and the events'
// marks (EventMarkStore); the sync lease is its Leaser (lease.go).

// StateStore keeps the marks. Implementations must never move a mark
// backwards: Commit keeps the greater HwmMs of the stored and the given mark.
type StateStore interface {
	// Load returns every stored mark by variable id.
	Load(ctx context.Context) (map[string]Mark, error)
	// MarksOf hands fn the stored mark of each of ids that has one, as
	// Load has it. A cycle reads its marks so, one chunk of variables at a
	// time, so that it never holds every mark of the fleet. An error from
	// fn stops the read and is returned.
	MarksOf(ctx context.Context, ids []string, fn func(Mark) error) error
	// Commit stores marks, each merged with the stored one by MergeMark
	// (marks.go) so that none moves backwards, whatever order concurrent
	// commits land in. A failed Commit may have stored some of them: each
	// mark is safe alone, since it is committed only after the warehouse
	// acknowledged every point below it.
	Commit(ctx context.Context, marks []Mark) error
}

// EventMarkStore keeps the events' marks (state.ClickHouse). Like the
// variables' marks, an event's mark is committed only after the logs below
// it were stored.
type EventMarkStore interface {
	// EventMarks returns the stored marks by event key.
	EventMarks(ctx context.Context) (map[string]EventMark, error)
	// CommitEventMark stores the event's new mark.
	CommitEventMark(ctx context.Context, mark EventMark) error
}
