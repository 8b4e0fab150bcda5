package pipeline

import (
	"context"
	"time"
)

// The ports: every interface an adapter implements for the engine and
// the cycle, grouped by who implements it, so that a new source, warehouse
// or state store starts from this file; the metadata stages' own ports
// (groups, organizations, event logs) are pipeline/metadata's, in its
// ports.go. docs/architecture.md says which are needed for which command.
// Optional capabilities are fields of the options that take them
// (EngineOptions.Counts and Links, Stages.Metadata and Events), wired by
// cmd, never found by a type assertion.

// What a source implements. Series and Walk are the whole of what the
// engine reads; the rest are the scope resolution of a scoped walk
// (ScopeResolver) and one optional capability (CountSource). A source
// also classifies its errors with the interfaces of errors.go (retryable,
// past retention, not found, one variable's, too large) and, for
// `fleetsync verify`, implements pipeline/verify's Source. The metadata
// stages read more of it (pipeline/metadata's RefreshSource and
// EventSource, and its PermissionError).

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
// scopes to device ids: a scoped walk needs it (Scope.Groups and
// Organizations), and so does pipeline/metadata's refresh, to map devices
// to their groups and organizations.
type ScopeResolver interface {
	GroupDeviceIDs(ctx context.Context, group string) ([]string, error)
	OrganizationDeviceIDs(ctx context.Context, org string) ([]string, error)
}

// What a warehouse implements: the streamed INSERTs of points (Writer,
// Insert); for `fleetsync verify`, pipeline/verify's Warehouse. Tables it
// derives from the points are kept by a link of the commit chain
// (commit.go) that cmd puts in EngineOptions.Links: the analyst tables'
// is load/analyst's, over the warehouse's analyst.Tables. The metadata tables and the event logs are
// pipeline/metadata's ports (Writer, RefreshStore, EventLogWriter).

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

// SnapshotWriter is the metadata stage of a cycle (Stages.Metadata): it
// takes the cycle's walk as it comes, page by page, and once the walk is
// complete tells what was deleted and refreshes the rest of the fleet's
// metadata. pipeline/metadata's *Refresh is the full one; its Plain makes
// one of a warehouse that stores the walk as it is. The Syncer needs no
// more of the metadata stage than this port, so that the cycle does not
// depend on groups, organizations or event logs.
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

// EventSyncer is the event-log stage of a cycle (Stages.Events),
// pipeline/metadata's *EventSync: the Syncer only runs it once the walk's
// metadata is finished, and reports its failure with the metadata's.
type EventSyncer interface {
	// Sync loads the new logs of every configured event. Its error
	// does not fail the cycle: it is returned in a *MetadataError after
	// the points are synced.
	Sync(ctx context.Context) error
}

// What a state store implements: the marks (StateStore); the sync lease
// is its Leaser (lease.go), and the events' marks pipeline/metadata's
// EventMarkStore.

// StateStore keeps the marks. Implementations must never move a mark
// backwards: Commit keeps the greater HwmMs of the stored and the given
// mark, and the greater RereadMs of two reckoned under one lookback
// (MergeMark).
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
