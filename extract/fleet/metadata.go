package fleet

import (
	"context"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
)

// GroupDeviceIDs returns the ids of a device group's members (group is an id
// or a `~label`).
func (s *Source) GroupDeviceIDs(ctx context.Context, group string) ([]string, error) {
	return s.c.GroupDeviceIDs(ctx, group)
}

// OrganizationDeviceIDs returns the ids of an organization's devices (org is
// an id or a `~label`).
func (s *Source) OrganizationDeviceIDs(ctx context.Context, org string) ([]string, error) {
	return s.c.OrganizationDeviceIDs(ctx, org)
}

// ListDeviceGroups lists every device group. Members is left empty: the
// group representation's `devices` field is not documented beyond being an
// array, so members come from GroupDeviceIDs.
func (s *Source) ListDeviceGroups(ctx context.Context, fn func(metadata.DeviceGroup) error) error {
	return s.c.DeviceGroups(ctx, func(g fleetapi.DeviceGroup) error {
		tags := g.Tags
		if tags == nil {
			tags = []string{}
		}
		return fn(metadata.DeviceGroup{ID: g.ID, Label: g.Label, Name: g.Name, URL: g.URL,
			Organization: g.Organization, Tags: tags, CreatedAt: g.CreatedAt})
	})
}

// ListOrganizations lists every organization. With an ordinary token it
// fails with a 403 *fleetapi.APIError whose PermissionDenied is true.
func (s *Source) ListOrganizations(ctx context.Context, fn func(metadata.Organization) error) error {
	return s.c.Organizations(ctx, func(o fleetapi.Organization) error {
		return fn(metadata.Organization{ID: o.ID, Label: o.Label, Name: o.Name, URL: o.URL, CreatedAt: o.CreatedAt})
	})
}

// ListEventLogs lists the event's logs with the client's page size sent
// explicitly; Raw is the log object as compact JSON.
func (s *Source) ListEventLogs(ctx context.Context, event string, fn func(metadata.EventLog) error) error {
	return s.c.EventLogs(ctx, event, 0, func(l fleetapi.EventLog) error {
		return fn(metadata.EventLog{Event: event, ID: l.ID, CreatedAt: l.CreatedAt, Raw: l.Object()})
	})
}
