package metadata

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// The lists a Refresh reads beyond the walk: device groups with their
// members, organizations, and the organizations' devices (what maps a
// device to its organization). They are read on a process's first cycle
// and then once every RefreshOptions.ListEvery (see Refresh).

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
	errs := pipeline.ForEach(ctx, len(groups), f.opts.MaxInFlight, func(i int) error {
		ids, err := f.src.GroupDeviceIDs(ctx, groups[i].ID)
		switch {
		case pipeline.IsNotFound(err):
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
	errs := pipeline.ForEach(ctx, len(orgs), f.opts.MaxInFlight, func(i int) error {
		ids, err := f.src.OrganizationDeviceIDs(ctx, orgs[i])
		switch {
		case pipeline.IsNotFound(err):
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

// dedup is ids without repeats, in their first order: a group listing
// or a configured event may name one twice.
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
