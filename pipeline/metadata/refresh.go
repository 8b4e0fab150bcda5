package metadata

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
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
// their membership. It is the Syncer's pipeline.Stages.Metadata. Safe
// for concurrent use by one cycle at a time.
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

var _ pipeline.SnapshotWriter = (*Refresh)(nil)

// BeginSnapshot starts refreshing every metadata table from one cycle's
// walk: it reads the stored devices and the stored variables' compact
// form, and lists groups and organizations (or takes the kept listing, see
// Refresh), so that each device is stored with its organization as the
// walk hands it on. An error storing devices or variables is returned as
// is and fails the cycle; failures of the rest come back together from
// Finish as a *pipeline.MetadataError, after everything else was tried.
func (f *Refresh) BeginSnapshot(ctx context.Context, scoped bool, at time.Time) (pipeline.SnapshotRun, error) {
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
	devices []pipeline.Device
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

func (r *refreshRun) Devices(ctx context.Context, devices []pipeline.Device) error {
	var add []pipeline.Device
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

func (r *refreshRun) Variables(ctx context.Context, vars []pipeline.Variable) error {
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
		return &pipeline.MetadataError{Errs: problems}
	}
	return nil
}
