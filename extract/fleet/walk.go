package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// lister is what the walk reads: *Source implements it over the client,
// tests fake it.
type lister interface {
	Devices(ctx context.Context, fn func(pipeline.Device) error) error
	Variables(ctx context.Context, d pipeline.Device, fn func(pipeline.Variable) error) error
}

// accountLister is a lister that can also list every variable of the
// account at once, in a few pages rather than one request per device. The
// spec does not show that such a listing names each variable's device, so
// a variable whose DeviceID is empty means the listing cannot be used.
type accountLister interface {
	// AllVariables yields each variable id but the empty one at most once
	// (as the client's paging does, across pages and restarts).
	AllVariables(ctx context.Context, fn func(pipeline.Variable) error) error
}

// walker lists the in-scope devices and variables through l.
type walker struct {
	l    lister
	opts Options
	log  *zap.Logger
}

// errUnattributed stops an account-wide variable listing at the first
// variable that does not name a device of the device list.
var errUnattributed = errors.New("a variable names no listed device")

// walkBatch is how many variables of the account-wide list go to the sink
// in one call: enough that a sink's cost per call (a warehouse query) is
// paid rarely, few enough that what the walk holds does not grow with the
// fleet.
const walkBatch = 1000

// walk lists the in-scope devices and their variables into sink. What it
// holds is the device list (a few per cent of the variables) and a batch of
// variables or the variables of the devices being listed, never the
// fleet's variables, so that its memory does not grow with them.
//
// Every in-scope device goes to sink.Devices before any variable (and a
// device found by the second device listing before its own). A device that
// answers 404 while its variables are listed was handed already; only its
// variables are left out. When the account-wide variable list turns out
// not to name a listed device for every variable, the batches it handed
// so far are handed again by the per-device listing, as the WalkSink
// contract allows.
func (s *walker) walk(ctx context.Context, scope pipeline.Scope, sink pipeline.WalkSink) error {
	keep, err := s.scopeFilter(ctx, scope)
	if err != nil {
		return err
	}
	seenDev := make(map[string]bool)
	// listed holds every device listed, in scope or not, so that the
	// account-wide variable list can be checked against it.
	listed := make(map[string]bool)
	// listDevices pages through the devices and returns those not seen
	// before (a device added while paging can appear on two pages).
	listDevices := func() ([]pipeline.Device, error) {
		var out []pipeline.Device
		err := s.l.Devices(ctx, func(d pipeline.Device) error {
			listed[d.ID] = true
			if keep(d) && !seenDev[d.ID] {
				seenDev[d.ID] = true
				out = append(out, d)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list devices: %w", err)
		}
		return out, nil
	}
	// handDevices gives the sink its own copy: the walk goes on reading
	// devices, and the slices it hands are the sink's.
	handDevices := func(devices []pipeline.Device) error {
		if len(devices) == 0 {
			return nil
		}
		return sink.Devices(ctx, slices.Clone(devices))
	}
	devices, err := listDevices()
	if err != nil {
		return err
	}
	if err := handDevices(devices); err != nil {
		return err
	}
	// The account-wide list costs pages of every variable, the per-device
	// one a request per in-scope device: the former wins unless the scope
	// is a small part of the fleet.
	if l, ok := s.l.(accountLister); ok && !s.opts.PerDeviceVariables && 2*len(devices) >= len(listed) && len(devices) > 0 {
		handed, complete, err := s.accountVariables(ctx, l, devices, listed, sink)
		if err != nil {
			return err
		}
		if complete {
			return nil
		}
		s.log.Info("the account-wide variable list does not name a listed device for every variable (the service does not say, or devices changed meanwhile); listing each device's variables instead",
			zap.Int("variables_handed_again", handed))
	}
	gone, err := s.deviceVariables(ctx, devices, sink)
	if err != nil {
		return err
	}
	if gone > 0 {
		// A device deleted while the list was paged through shifts the later
		// pages forward, so a device that exists may have been skipped. One
		// more pass picks those up; further churn waits for the next cycle.
		more, err := listDevices()
		if err != nil {
			return err
		}
		if err := handDevices(more); err != nil {
			return err
		}
		if _, err := s.deviceVariables(ctx, more, sink); err != nil {
			return err
		}
	}
	return nil
}

// accountVariables hands the variables of the in-scope devices to sink
// through the account-wide list, walkBatch at a time, and returns how many
// it handed. complete is false, and the caller must list device by device,
// as soon as one variable names no device or a device the device list did
// not have: the service may not name devices at all, or a device created or
// shifted past a page boundary since would be missed. The batches handed
// until then stay handed; the partial batch is dropped.
func (s *walker) accountVariables(ctx context.Context, l accountLister, devices []pipeline.Device, listed map[string]bool, sink pipeline.WalkSink) (handed int, complete bool, err error) {
	inScope := make(map[string]*pipeline.Device, len(devices))
	for i := range devices {
		inScope[devices[i].ID] = &devices[i]
	}
	var batch []pipeline.Variable
	// sinkErr is the sink's failure, returned as it is rather than as a
	// failure of the listing it stopped.
	var sinkErr error
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		b := batch
		batch = nil
		if sinkErr = sink.Variables(ctx, b); sinkErr != nil {
			return sinkErr
		}
		handed += len(b)
		return nil
	}
	// The list never yields an id twice (the client's paging drops an
	// object seen on an earlier page), but for the empty id, kept once
	// here as before: no set of every id of the account is needed.
	seenEmpty := false
	err = l.AllVariables(ctx, func(v pipeline.Variable) error {
		if v.DeviceID == "" || !listed[v.DeviceID] {
			return errUnattributed
		}
		d, ok := inScope[v.DeviceID]
		if !ok || (v.ID == "" && seenEmpty) {
			return nil
		}
		seenEmpty = seenEmpty || v.ID == ""
		// The device's own strings, shared by its variables rather than
		// one copy each.
		v.DeviceID, v.DeviceLabel = d.ID, d.Label
		if batch == nil {
			batch = make([]pipeline.Variable, 0, walkBatch)
		}
		batch = append(batch, v)
		if len(batch) == walkBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	switch {
	case sinkErr != nil:
		return handed, false, sinkErr
	case errors.Is(err, errUnattributed):
		return handed, false, nil
	case err != nil:
		return handed, false, fmt.Errorf("list variables: %w", err)
	}
	return handed, true, nil
}

// deviceVariables hands the variables of each device to sink as the
// device's list completes, with the same concurrency as data requests; the
// sink is called one device at a time, and its failure cancels the
// listings still running and is returned as it is. A device that answers
// 404 was deleted after the device list was read: its variables are left
// out and it is counted in gone, rather than failing the cycle (steady
// churn would otherwise stop every sync). Another device's failure fails
// the walk once every device was tried, as before; the variables handed by
// then stay handed.
func (s *walker) deviceVariables(ctx context.Context, devices []pipeline.Device, sink pipeline.WalkSink) (gone int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		sinkErr error
	)
	hand := func(vars []pipeline.Variable) error {
		mu.Lock()
		defer mu.Unlock()
		if sinkErr != nil {
			return sinkErr
		}
		if len(vars) == 0 {
			return nil
		}
		if sinkErr = sink.Variables(ctx, vars); sinkErr != nil {
			cancel()
		}
		return sinkErr
	}
	errs := pipeline.ForEach(ctx, len(devices), s.opts.MaxInFlight, func(i int) error {
		d := devices[i]
		var vars []pipeline.Variable
		err := s.l.Variables(ctx, d, func(v pipeline.Variable) error {
			v.DeviceID, v.DeviceLabel = d.ID, d.Label
			vars = append(vars, v)
			return nil
		})
		if err != nil {
			return err
		}
		return hand(vars)
	})
	if sinkErr != nil {
		// The other failures are the cancellation it caused, or beside
		// the point now.
		return 0, sinkErr
	}
	for i, d := range devices {
		switch {
		case pipeline.IsNotFound(errs[i]):
			s.log.Info("device disappeared during the metadata walk; it is left out of this cycle",
				zap.String("device", d.Label), zap.String("device_id", d.ID))
			gone++
			errs[i] = nil
		case errs[i] != nil:
			errs[i] = fmt.Errorf("list variables of device %s (%s): %w", d.Label, d.ID, errs[i])
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return gone, nil
}

func (s *walker) scopeFilter(ctx context.Context, scope pipeline.Scope) (func(pipeline.Device) bool, error) {
	if scope.Empty() {
		return func(pipeline.Device) bool { return true }, nil
	}
	ids := make(map[string]bool)
	if len(scope.Groups)+len(scope.Organizations) > 0 {
		r, ok := s.l.(pipeline.ScopeResolver)
		if !ok {
			return nil, errors.New("scope by device group or organization needs a source that can list them")
		}
		for _, g := range scope.Groups {
			got, err := r.GroupDeviceIDs(ctx, g)
			if err != nil {
				return nil, fmt.Errorf("resolve device group %s: %w", g, err)
			}
			for _, id := range got {
				ids[id] = true
			}
		}
		for _, o := range scope.Organizations {
			got, err := r.OrganizationDeviceIDs(ctx, o)
			if err != nil {
				return nil, fmt.Errorf("resolve organization %s: %w", o, err)
			}
			for _, id := range got {
				ids[id] = true
			}
		}
	}
	return func(d pipeline.Device) bool {
		if ids[d.ID] {
			return true
		}
		for _, k := range scope.Devices {
			if k == d.ID || (len(k) > 1 && k[0] == '~' && k[1:] == d.Label) {
				return true
			}
		}
		for _, t := range scope.Tags {
			if slices.Contains(d.Tags, t) {
				return true
			}
		}
		return false
	}, nil
}
