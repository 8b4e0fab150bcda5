package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// RefreshOptions configure the metadata refresh.
type RefreshOptions struct {
	// MaxInFlight bounds concurrent listing requests; 0 means 4.
	MaxInFlight int
	// ListEvery is how long a listing of the device groups, their members
	// and the organizations serves the cycles that follow before they are
	// listed again (sync.metadata_refresh); 0 lists them every cycle. In a
	// live fleet's steady state these lists cost more requests than the
	// device and variable pages every cycle must read, and they seldom
	// change.
	ListEvery time.Duration
}

// Refresh is the metadata stage of a cycle: it refreshes the fleet's
// metadata in the warehouse from the cycle's walk: devices and variables
// (marking those deleted in the source), organizations, device groups and
// their membership. It is the Syncer's Stages.Metadata. Safe for
// concurrent use by one cycle at a time.
//
// Devices and variables are refreshed from every walk; groups, members and
// organizations are listed again only once RefreshOptions.ListEvery has
// passed since their last complete listing, which a Refresh keeps in
// memory for the cycles between (a new process lists on its first cycle).
type Refresh struct {
	src   RefreshSource
	store RefreshStore
	opts  RefreshOptions
	log   *zap.Logger
	// orgsDenied is set once the token was refused the organization list,
	// so the hint is logged once per process, not every cycle.
	orgsDenied atomic.Bool

	mu sync.Mutex
	// kept is the last complete listing (none of its lists failed, and
	// its tables were written) and keptAt the time of the cycle that read
	// it; nil until one succeeds.
	kept   *listing
	keptAt time.Time
}

// listing is what one read of the group, membership and organization
// lists found; a kept one is only read, never changed, by later cycles.
type listing struct {
	groups []DeviceGroup
	// groupsRead is false when the group list failed: the groups table is
	// then not written, lest a partial list mark groups deleted.
	groupsRead bool
	orgs       []Organization
	// orgsRead is false when the organization list failed or the token
	// may not read it.
	orgsRead bool
	// devOrg maps device ids to the organization listing them; goneOrgs
	// are organizations that no longer exist.
	devOrg   map[string]string
	goneOrgs map[string]bool
}

// NewRefresh wires a Refresh. logger may be nil.
func NewRefresh(src RefreshSource, store RefreshStore, opts RefreshOptions, logger *zap.Logger) *Refresh {
	if logger == nil {
		logger = zap.NewNop()
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4
	}
	return &Refresh{src: src, store: store, opts: opts, log: logger}
}

var _ SnapshotWriter = (*Refresh)(nil)

// BeginSnapshot starts refreshing every metadata table from one cycle's
// walk: it reads the stored devices and the stored variables' compact
// form, and lists groups and organizations (or takes the kept listing, see
// Refresh), so that each device is stored with its organization as the
// walk hands it on. An error storing devices or variables is returned as
// is and fails the cycle; failures of the rest come back together from
// Finish as a *MetadataError, after everything else was tried.
func (f *Refresh) BeginSnapshot(ctx context.Context, scoped bool, at time.Time) (SnapshotRun, error) {
	live, err := f.store.LiveDevices(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the stored devices: %w", err)
	}
	changes, err := f.store.ChangedVariables(ctx, at)
	if err != nil {
		return nil, fmt.Errorf("read the stored variables: %w", err)
	}
	r := &refreshRun{f: f, scoped: scoped, at: at, live: live, changes: changes, walked: map[string]bool{}}
	if l := f.keptListing(at); l != nil {
		r.listing = *l
		return r, nil
	}
	r.listing, r.problems = f.list(ctx, live)
	r.listed = true
	return r, nil
}

// keptListing is the kept listing when it may serve a cycle at at: read
// less than ListEvery before it. A clock that went back past the listing
// lists again rather than keep it for longer than ListEvery.
func (f *Refresh) keptListing(at time.Time) *listing {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kept == nil || at.Before(f.keptAt) || at.Sub(f.keptAt) >= f.opts.ListEvery {
		return nil
	}
	f.log.Debug("device groups and organizations not listed: the listing kept serves until metadata_refresh has passed",
		zap.Time("listed_at", f.keptAt), zap.Duration("metadata_refresh", f.opts.ListEvery))
	return f.kept
}

// list lists the groups with their members, the organizations and the
// organizations' devices; problems are the lists that failed (a 403 on the
// organizations is not one: it is an answer, kept like any other).
func (f *Refresh) list(ctx context.Context, live map[string]string) (l listing, problems []error) {
	var err error
	l.groups, err = f.deviceGroups(ctx)
	if err != nil {
		problems = append(problems, err)
	}
	l.groupsRead = err == nil
	l.orgs, l.orgsRead, err = f.organizations(ctx)
	if err != nil {
		problems = append(problems, err)
	}
	l.devOrg, l.goneOrgs, err = f.deviceOrganizations(ctx, orgIDs(l.orgs, l.groups, live))
	if err != nil {
		problems = append(problems, err)
	}
	return l, problems
}

// refreshRun is one walk's refresh (see Refresh.BeginSnapshot). It holds
// the walk's devices (a few per thousand variables) and the store's
// compact form of the variables, never the walk's variables.
type refreshRun struct {
	f      *Refresh
	scoped bool
	at     time.Time
	// live are the stored devices' organizations as the walk began.
	live    map[string]string
	changes VariableChanges
	// walked are the walk's devices, devices the same.
	walked  map[string]bool
	devices []Device
	// listing is what BeginSnapshot listed, or the kept listing it took;
	// listed says it was listed for this cycle, so Finish writes the
	// groups and organizations (the kept ones were written when read).
	listing
	listed           bool
	problems         []error
	devicesWritten   int
	variables        int
	variablesWritten int
}

func (r *refreshRun) Devices(ctx context.Context, devices []Device) error {
	var add []Device
	for _, d := range devices {
		if r.walked[d.ID] {
			continue
		}
		r.walked[d.ID] = true
		if d.Organization == "" {
			d.Organization = r.devOrg[d.ID]
		}
		if prev := r.live[d.ID]; d.Organization == "" && !r.goneOrgs[prev] {
			// Not listed under any organization we could read this
			// time: keep what was known rather than blank it.
			d.Organization = prev
		}
		add = append(add, d)
	}
	if len(add) == 0 {
		return nil
	}
	r.devices = append(r.devices, add...)
	diff, err := r.f.store.WriteChangedDevices(ctx, add, r.at)
	if err != nil {
		return fmt.Errorf("store device metadata: %w", err)
	}
	r.devicesWritten += diff.Written
	return nil
}

func (r *refreshRun) Variables(ctx context.Context, vars []Variable) error {
	n, err := r.changes.Write(ctx, vars)
	if err != nil {
		return fmt.Errorf("store variable metadata: %w", err)
	}
	r.variables += len(vars)
	r.variablesWritten += n
	return nil
}

func (r *refreshRun) Finish(ctx context.Context) error {
	f := r.f
	f.log.Info("devices and variables stored", zap.Int("devices_written", r.devicesWritten), zap.Int("variables_written", r.variablesWritten),
		zap.Int("devices", len(r.devices)), zap.Int("variables", r.variables))
	problems := r.problems
	// Only a complete listing whose tables were written is kept, so that
	// a failed list or write is tried again on the next cycle (the listing
	// kept before, if any, was already too old for this one).
	keep := r.listed && len(r.problems) == 0
	missing, err := r.changes.Missing(ctx)
	if err != nil {
		problems = append(problems, fmt.Errorf("read the stored variables the walk lacked: %w", err))
	} else if err := f.markDeleted(ctx, r.devices, r.scoped, r.live, missing); err != nil {
		problems = append(problems, err)
	}
	if r.listed && r.groupsRead {
		if err := f.store.WriteDeviceGroups(ctx, r.groups, r.at); err != nil {
			problems = append(problems, fmt.Errorf("store device groups: %w", err))
			keep = false
		}
	}
	if r.listed && r.orgsRead {
		if err := f.store.WriteOrganizations(ctx, r.orgs, r.at); err != nil {
			problems = append(problems, fmt.Errorf("store organizations: %w", err))
			keep = false
		}
	}
	if keep {
		l := r.listing
		f.mu.Lock()
		f.kept, f.keptAt = &l, r.at
		f.mu.Unlock()
	}
	if len(problems) > 0 {
		return &MetadataError{Errs: problems}
	}
	return nil
}

// deviceGroups lists every group and its members. It fails whole when any
// listing fails, so that a partial list never marks groups deleted.
func (f *Refresh) deviceGroups(ctx context.Context) ([]DeviceGroup, error) {
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
func (f *Refresh) organizations(ctx context.Context) (orgs []Organization, read bool, err error) {
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
func (f *Refresh) deviceOrganizations(ctx context.Context, orgs []string) (byDevice map[string]string, gone map[string]bool, err error) {
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
// that the walk did not see is deleted, and so is one of a device that is
// gone, whether or not that device is still stored live: another process
// may have marked the device deleted while this one's walk still stored
// the variable. missing are the live variables the walk did not see.
func (f *Refresh) markDeleted(ctx context.Context, devices []Device, scoped bool, live map[string]string, missing []StoredRef) error {
	walked := make(map[string]bool, len(devices))
	for _, d := range devices {
		walked[d.ID] = true
	}
	// The devices that may be gone: stored live and not walked, or named
	// by a stored variable the walk lacked and not walked.
	var gone []string
	candidate := map[string]bool{}
	for id := range live {
		if !walked[id] {
			candidate[id] = true
			gone = append(gone, id)
		}
	}
	for _, v := range missing {
		if !walked[v.DeviceID] && !candidate[v.DeviceID] {
			candidate[v.DeviceID] = true
			gone = append(gone, v.DeviceID)
		}
	}
	if len(devices) == 0 && len(gone) > 0 && !scoped {
		// An empty account is more likely a source answering oddly than a
		// fleet deleted whole; do not wipe the warehouse's view on it.
		f.log.Warn("the source listed no devices at all; not marking the stored ones deleted", zap.Int("stored", len(gone)))
		return nil
	}
	if scoped && len(gone) > 0 {
		exists := map[string]bool{}
		if err := f.src.Devices(ctx, func(d Device) error {
			exists[d.ID] = true
			return nil
		}); err != nil {
			return fmt.Errorf("list all devices to tell deleted from out-of-scope ones: %w", err)
		}
		gone = slices.DeleteFunc(gone, func(id string) bool { return exists[id] })
	}
	goneSet := make(map[string]bool, len(gone))
	for _, id := range gone {
		goneSet[id] = true
	}
	var goneVars []string
	for _, v := range missing {
		if goneSet[v.DeviceID] || walked[v.DeviceID] {
			goneVars = append(goneVars, v.ID)
		}
	}
	// Only the devices stored live are marked.
	gone = slices.DeleteFunc(gone, func(id string) bool { _, ok := live[id]; return !ok })
	sort.Strings(gone)
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
