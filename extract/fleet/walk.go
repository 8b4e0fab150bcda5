package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"

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

// walk lists the in-scope devices and their variables.
func (s *walker) walk(ctx context.Context, scope pipeline.Scope) ([]pipeline.Device, []pipeline.Variable, error) {
	keep, err := s.scopeFilter(ctx, scope)
	if err != nil {
		return nil, nil, err
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
	devices, err := listDevices()
	if err != nil {
		return nil, nil, err
	}
	// The account-wide list costs pages of every variable, the per-device
	// one a request per in-scope device: the former wins unless the scope
	// is a small part of the fleet.
	if l, ok := s.l.(accountLister); ok && !s.opts.PerDeviceVariables && 2*len(devices) >= len(listed) && len(devices) > 0 {
		vars, complete, err := s.accountVariables(ctx, l, devices, listed)
		if err != nil {
			return nil, nil, err
		}
		if complete {
			return devices, vars, nil
		}
		s.log.Info("the account-wide variable list does not name a listed device for every variable (the service does not say, or devices changed meanwhile); listing each device's variables instead")
	}
	devices, perDevice, gone, err := s.deviceVariables(ctx, devices)
	if err != nil {
		return nil, nil, err
	}
	if gone > 0 {
		// A device deleted while the list was paged through shifts the later
		// pages forward, so a device that exists may have been skipped. One
		// more pass picks those up; further churn waits for the next cycle.
		more, err := listDevices()
		if err != nil {
			return nil, nil, err
		}
		more, moreVars, _, err := s.deviceVariables(ctx, more)
		if err != nil {
			return nil, nil, err
		}
		devices, perDevice = append(devices, more...), append(perDevice, moreVars...)
	}
	var vars []pipeline.Variable
	seen := make(map[string]bool)
	for _, vs := range perDevice {
		for _, v := range vs {
			if !seen[v.ID] {
				seen[v.ID] = true
				vars = append(vars, v)
			}
		}
	}
	return devices, vars, nil
}

// accountVariables lists the variables of the in-scope devices through the
// account-wide list. complete is false, and the caller must list device by
// device, as soon as one variable names no device or a device the device
// list did not have: the service may not name devices at all, or a device
// created or shifted past a page boundary since would be missed.
func (s *walker) accountVariables(ctx context.Context, l accountLister, devices []pipeline.Device, listed map[string]bool) (vars []pipeline.Variable, complete bool, err error) {
	inScope := make(map[string]*pipeline.Device, len(devices))
	for i := range devices {
		inScope[devices[i].ID] = &devices[i]
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
		vars = append(vars, v)
		return nil
	})
	switch {
	case errors.Is(err, errUnattributed):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("list variables: %w", err)
	}
	return vars, true, nil
}

// deviceVariables lists the variables of each device, with the same
// concurrency as data requests. A device that answers 404 was deleted after
// the device list was read: it is dropped and counted in gone, rather than
// failing the cycle (steady churn would otherwise stop every sync).
func (s *walker) deviceVariables(ctx context.Context, devices []pipeline.Device) (kept []pipeline.Device, perDevice [][]pipeline.Variable, gone int, err error) {
	all := make([][]pipeline.Variable, len(devices))
	errs := pipeline.ForEach(ctx, len(devices), s.opts.MaxInFlight, func(i int) error {
		d := devices[i]
		return s.l.Variables(ctx, d, func(v pipeline.Variable) error {
			v.DeviceID, v.DeviceLabel = d.ID, d.Label
			all[i] = append(all[i], v)
			return nil
		})
	})
	for i, d := range devices {
		switch {
		case pipeline.IsNotFound(errs[i]):
			s.log.Info("device disappeared during the metadata walk; it is left out of this cycle",
				zap.String("device", d.Label), zap.String("device_id", d.ID))
			gone++
		case errs[i] != nil:
			errs[i] = fmt.Errorf("list variables of device %s (%s): %w", d.Label, d.ID, errs[i])
		default:
			kept = append(kept, d)
			perDevice = append(perDevice, all[i])
		}
		if pipeline.IsNotFound(errs[i]) {
			errs[i] = nil
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, 0, err
	}
	return kept, perDevice, gone, nil
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
