package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

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

// FleetSource is what the metadata refresh reads beyond devices and
// variables: groups with their members, organizations, and event logs.
type FleetSource interface {
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
	// ListEventLogs calls fn for the event's logs, page by page, following
	// the service's cursor. An error returned by fn stops the listing and
	// is returned wrapped.
	ListEventLogs(ctx context.Context, event string, fn func(EventLog) error) error
}

// FleetStore is the warehouse side of the metadata refresh.
type FleetStore interface {
	MetadataWriter
	// LiveDevices returns the organization id (maybe empty) of every device
	// not marked deleted, by device id.
	LiveDevices(ctx context.Context) (map[string]string, error)
	// Variables returns the variables not marked deleted (ID and DeviceID
	// at least).
	Variables(ctx context.Context) ([]Variable, error)
	MarkDevicesDeleted(ctx context.Context, ids []string) error
	MarkVariablesDeleted(ctx context.Context, ids []string) error
	// WriteOrganizations stores the complete list of organizations; those
	// stored before and missing from it are marked deleted.
	WriteOrganizations(ctx context.Context, orgs []Organization, syncedAt time.Time) error
	// WriteDeviceGroups stores the complete list of groups with their
	// members: groups missing from it are marked deleted, and memberships
	// missing from it are marked removed.
	WriteDeviceGroups(ctx context.Context, groups []DeviceGroup, syncedAt time.Time) error
	// EventMarks returns the stored marks by event key.
	EventMarks(ctx context.Context) (map[string]EventMark, error)
	// WriteEventLogs stores logs of mark.Event, then the mark, so that a
	// mark never runs ahead of the logs below it.
	WriteEventLogs(ctx context.Context, logs []EventLog, mark EventMark) error
}

// Snapshot is one cycle's walk of the in-scope fleet.
type Snapshot struct {
	Devices   []Device
	Variables []Variable
	// Scoped says the walk was restricted by a scope, so a device missing
	// from it may merely be out of scope rather than deleted.
	Scoped bool
	At     time.Time
}

// SnapshotWriter is a MetadataWriter that takes a cycle's whole walk at once,
// so that it can also tell what was deleted and refresh the rest of the
// fleet's metadata. Syncer uses it instead of WriteDevices and
// WriteVariables when the MetadataWriter implements it.
type SnapshotWriter interface {
	WriteSnapshot(ctx context.Context, snap Snapshot) error
}

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

// FleetOptions configure the metadata refresh.
type FleetOptions struct {
	// Events are the event keys (ids or ~labels) whose logs are synced.
	Events []string
	// MaxInFlight bounds concurrent listing requests; 0 means 4.
	MaxInFlight int
}

// Fleet refreshes the fleet's metadata in the warehouse each cycle: devices
// and variables (marking those deleted in the source), organizations,
// device groups and their membership, and event logs. It is the Syncer's
// MetadataWriter. Safe for concurrent use by one cycle at a time.
type Fleet struct {
	src   FleetSource
	store FleetStore
	opts  FleetOptions
	log   *zap.Logger
	// orgsDenied is set once the token was refused the organization list,
	// so the hint is logged once per process, not every cycle.
	orgsDenied atomic.Bool
}

// NewFleet wires a Fleet. logger may be nil.
func NewFleet(src FleetSource, store FleetStore, opts FleetOptions, logger *zap.Logger) *Fleet {
	if logger == nil {
		logger = zap.NewNop()
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4
	}
	return &Fleet{src: src, store: store, opts: opts, log: logger}
}

var (
	_ MetadataWriter = (*Fleet)(nil)
	_ SnapshotWriter = (*Fleet)(nil)
)

// WriteDevices stores devices as they are (no deletion marks).
func (f *Fleet) WriteDevices(ctx context.Context, devices []Device, syncedAt time.Time) error {
	return f.store.WriteDevices(ctx, devices, syncedAt)
}

// WriteVariables stores variables as they are (no deletion marks).
func (f *Fleet) WriteVariables(ctx context.Context, vars []Variable, syncedAt time.Time) error {
	return f.store.WriteVariables(ctx, vars, syncedAt)
}

// WriteSnapshot refreshes every metadata table from one cycle's walk. An
// error storing devices or variables is returned as is and fails the cycle;
// failures of the rest come back together as a *MetadataError after
// everything else was tried.
func (f *Fleet) WriteSnapshot(ctx context.Context, snap Snapshot) error {
	var problems []error
	live, err := f.store.LiveDevices(ctx)
	if err != nil {
		return fmt.Errorf("read the stored devices: %w", err)
	}

	groups, groupsErr := f.deviceGroups(ctx)
	if groupsErr != nil {
		problems = append(problems, groupsErr)
	}
	orgs, orgsRead, err := f.organizations(ctx)
	if err != nil {
		problems = append(problems, err)
	}
	devOrg, goneOrgs, err := f.deviceOrganizations(ctx, orgIDs(orgs, groups, live))
	if err != nil {
		problems = append(problems, err)
	}

	devices := make([]Device, len(snap.Devices))
	for i, d := range snap.Devices {
		if d.Organization == "" {
			d.Organization = devOrg[d.ID]
		}
		if prev := live[d.ID]; d.Organization == "" && !goneOrgs[prev] {
			// Not listed under any organization we could read this
			// time: keep what was known rather than blank it.
			d.Organization = prev
		}
		devices[i] = d
	}
	if err := f.store.WriteDevices(ctx, devices, snap.At); err != nil {
		return fmt.Errorf("store device metadata: %w", err)
	}
	if err := f.store.WriteVariables(ctx, snap.Variables, snap.At); err != nil {
		return fmt.Errorf("store variable metadata: %w", err)
	}
	if err := f.markDeleted(ctx, snap, live); err != nil {
		problems = append(problems, err)
	}
	if groupsErr == nil {
		if err := f.store.WriteDeviceGroups(ctx, groups, snap.At); err != nil {
			problems = append(problems, fmt.Errorf("store device groups: %w", err))
		}
	}
	if orgsRead {
		if err := f.store.WriteOrganizations(ctx, orgs, snap.At); err != nil {
			problems = append(problems, fmt.Errorf("store organizations: %w", err))
		}
	}
	if err := f.syncEvents(ctx); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return &MetadataError{Errs: problems}
	}
	return nil
}

// deviceGroups lists every group and its members. It fails whole when any
// listing fails, so that a partial list never marks groups deleted.
func (f *Fleet) deviceGroups(ctx context.Context) ([]DeviceGroup, error) {
	var groups []DeviceGroup
	if err := f.src.ListDeviceGroups(ctx, func(g DeviceGroup) error {
		groups = append(groups, g)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list device groups: %w", err)
	}
	gone := make([]bool, len(groups))
	errs := ForEach(ctx, len(groups), f.opts.MaxInFlight, func(i int) error {
		ids, err := f.src.GroupDeviceIDs(ctx, groups[i].ID)
		switch {
		case IsNotFound(err):
			// Deleted since the group list was read: left out, so it is
			// marked deleted like any group the list no longer has.
			gone[i] = true
			return nil
		case err != nil:
			return fmt.Errorf("list members of device group %s (%s): %w", groups[i].Label, groups[i].ID, err)
		}
		groups[i].Members = dedup(ids)
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	kept := groups[:0]
	for i, g := range groups {
		if !gone[i] {
			kept = append(kept, g)
		}
	}
	return kept, nil
}

// organizations lists the organizations; read is false when the token may
// not (logged once per Fleet, with the hint) or the listing failed.
func (f *Fleet) organizations(ctx context.Context) (orgs []Organization, read bool, err error) {
	err = f.src.ListOrganizations(ctx, func(o Organization) error {
		orgs = append(orgs, o)
		return nil
	})
	switch {
	case err == nil:
		return orgs, true, nil
	case IsPermissionDenied(err):
		if !f.orgsDenied.Swap(true) {
			f.log.Warn("the token may not read organizations, so the organizations table is not filled; "+
				"use an organization- or account-scoped token for it (devices are still mapped to organizations through their groups)",
				zap.Error(err))
		}
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("list organizations: %w", err)
	}
}

// orgIDs are the organizations whose device lists map devices to them: the
// listed ones, those groups belong to (an ordinary token may read those
// lists though not the organizations), and those already known.
func orgIDs(orgs []Organization, groups []DeviceGroup, live map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(id string) {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, o := range orgs {
		add(o.ID)
	}
	for _, g := range groups {
		add(g.Organization)
	}
	for _, o := range live {
		add(o)
	}
	sort.Strings(out)
	return out
}

// deviceOrganizations maps device ids to the organization listing them.
// An organization that no longer exists (404) is returned in gone; one that
// fails otherwise is reported, and the others still count.
func (f *Fleet) deviceOrganizations(ctx context.Context, orgs []string) (byDevice map[string]string, gone map[string]bool, err error) {
	lists := make([][]string, len(orgs))
	missing := make([]bool, len(orgs))
	errs := ForEach(ctx, len(orgs), f.opts.MaxInFlight, func(i int) error {
		ids, err := f.src.OrganizationDeviceIDs(ctx, orgs[i])
		switch {
		case IsNotFound(err):
			missing[i] = true
			return nil
		case err != nil:
			return fmt.Errorf("list devices of organization %s: %w", orgs[i], err)
		}
		lists[i] = ids
		return nil
	})
	byDevice, gone = map[string]string{}, map[string]bool{}
	for i, ids := range lists {
		if missing[i] {
			gone[orgs[i]] = true
		}
		for _, id := range ids {
			if _, ok := byDevice[id]; !ok {
				byDevice[id] = orgs[i]
			}
		}
	}
	return byDevice, gone, errors.Join(errs...)
}

// markDeleted flags stored devices and variables the source no longer has.
// The walk is complete (a failed walk never reaches here), but when it was
// scoped a missing device may only be out of scope: then only devices
// missing from the whole account's listing count as deleted. A device's
// variable listing is complete, so a stored variable of a walked device
// that the walk did not see is deleted.
func (f *Fleet) markDeleted(ctx context.Context, snap Snapshot, live map[string]string) error {
	walked := make(map[string]bool, len(snap.Devices))
	for _, d := range snap.Devices {
		walked[d.ID] = true
	}
	var gone []string
	for id := range live {
		if !walked[id] {
			gone = append(gone, id)
		}
	}
	if len(snap.Devices) == 0 && len(gone) > 0 && !snap.Scoped {
		// An empty account is more likely a source answering oddly than a
		// fleet deleted whole; do not wipe the warehouse's view on it.
		f.log.Warn("the source listed no devices at all; not marking the stored ones deleted", zap.Int("stored", len(gone)))
		return nil
	}
	if snap.Scoped && len(gone) > 0 {
		exists := map[string]bool{}
		if err := f.src.Devices(ctx, func(d Device) error {
			exists[d.ID] = true
			return nil
		}); err != nil {
			return fmt.Errorf("list all devices to tell deleted from out-of-scope ones: %w", err)
		}
		gone = slices.DeleteFunc(gone, func(id string) bool { return exists[id] })
	}
	sort.Strings(gone)
	goneSet := make(map[string]bool, len(gone))
	for _, id := range gone {
		goneSet[id] = true
	}
	seenVar := make(map[string]bool, len(snap.Variables))
	for _, v := range snap.Variables {
		seenVar[v.ID] = true
	}
	storedVars, err := f.store.Variables(ctx)
	if err != nil {
		return fmt.Errorf("read the stored variables: %w", err)
	}
	var goneVars []string
	for _, v := range storedVars {
		if goneSet[v.DeviceID] || (walked[v.DeviceID] && !seenVar[v.ID]) {
			goneVars = append(goneVars, v.ID)
		}
	}
	sort.Strings(goneVars)
	if len(gone) > 0 {
		if err := f.store.MarkDevicesDeleted(ctx, gone); err != nil {
			return fmt.Errorf("mark %d deleted devices: %w", len(gone), err)
		}
		f.log.Info("devices deleted in the source marked deleted", zap.Int("count", len(gone)))
	}
	if len(goneVars) > 0 {
		if err := f.store.MarkVariablesDeleted(ctx, goneVars); err != nil {
			return fmt.Errorf("mark %d deleted variables: %w", len(goneVars), err)
		}
		f.log.Info("variables deleted in the source marked deleted", zap.Int("count", len(goneVars)))
	}
	return nil
}

// syncEvents loads the new logs of every configured event. One event's
// failure (an unknown key, say) does not stop the others.
func (f *Fleet) syncEvents(ctx context.Context) error {
	if len(f.opts.Events) == 0 {
		return nil
	}
	marks, err := f.store.EventMarks(ctx)
	if err != nil {
		return fmt.Errorf("read event log marks: %w", err)
	}
	var errs []error
	total := 0
	for _, ev := range dedup(f.opts.Events) {
		n, err := f.SyncEvent(ctx, ev, marks[ev])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		total += n
	}
	f.log.Info("event logs synced", zap.Int("events", len(f.opts.Events)), zap.Int("new_logs", total), zap.Int("failed", len(errs)))
	return errors.Join(errs...)
}

// errEnough stops an event log listing once the rest is known to be old.
var errEnough = errors.New("the rest of the log is older than the mark")

// SyncEvent loads the logs of one event that are newer than mark and
// returns how many it stored. A log is new when its createdAt is after the
// mark, or equal to it with an id the mark does not list.
//
// The order of the log listing is not documented. When the logs seen so far
// come newest first, the listing stops at the first log older than the
// mark, so an idle event costs one request; in any other order every page is
// read (and only the new logs are stored).
func (f *Fleet) SyncEvent(ctx context.Context, event string, mark EventMark) (int, error) {
	mark.Event = event
	var fresh []EventLog
	var prev int64
	descending, ascending, first := false, false, true
	err := f.src.ListEventLogs(ctx, event, func(l EventLog) error {
		l.Event = event
		if l.ID == "" {
			// The table's key is (event, id); a log without an id is keyed
			// by its content so that distinct logs stay distinct.
			h := fnv.New64a()
			h.Write(l.Raw)
			l.ID = fmt.Sprintf("content-%016x", h.Sum64())
		}
		if l.CreatedAt.IsZero() {
			// No usable createdAt: it cannot be placed against the mark,
			// so it is stored every time (the table deduplicates it).
			fresh = append(fresh, l)
			return nil
		}
		us := l.CreatedAt.UnixMicro()
		if !first {
			descending = descending || us < prev
			ascending = ascending || us > prev
		}
		first, prev = false, us
		switch {
		case us > mark.CreatedAtUs, us == mark.CreatedAtUs && !slices.Contains(mark.IDs, l.ID):
			fresh = append(fresh, l)
		case us < mark.CreatedAtUs && descending && !ascending:
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return 0, fmt.Errorf("event %s: %w", event, err)
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	next := advance(mark, fresh)
	if err := f.store.WriteEventLogs(ctx, fresh, next); err != nil {
		return 0, fmt.Errorf("event %s: store %d logs: %w", event, len(fresh), err)
	}
	return len(fresh), nil
}

// advance moves mark over the fresh logs.
func advance(mark EventMark, fresh []EventLog) EventMark {
	next := EventMark{Event: mark.Event, CreatedAtUs: mark.CreatedAtUs, IDs: slices.Clone(mark.IDs)}
	for _, l := range fresh {
		if l.CreatedAt.IsZero() {
			continue
		}
		switch us := l.CreatedAt.UnixMicro(); {
		case us > next.CreatedAtUs:
			next.CreatedAtUs, next.IDs = us, []string{l.ID}
		case us == next.CreatedAtUs && !slices.Contains(next.IDs, l.ID):
			next.IDs = append(next.IDs, l.ID)
		}
	}
	sort.Strings(next.IDs)
	return next
}

// ForEach runs fn(0..n-1) with at most limit at once and returns the errors
// (nil entries for successes, one per index). The metadata walk and verify
// use it to keep a bounded number of API requests in flight.
func ForEach(ctx context.Context, n, limit int, fn func(i int) error) []error {
	errs := make([]error, n)
	sem := make(chan struct{}, max(1, limit))
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errs
}

func dedup(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
