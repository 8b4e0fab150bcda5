package fleetapi

import (
	"context"
	"net/http"

	"github.com/fleetsync/fleetsync/pipeline"
)

// The pipeline's views of the Platform API's groups, organizations and
// event logs: the pipeline resolves group and organization scopes to devices
// and refreshes the fleet's metadata through these, without importing this
// package.
var (
	_ pipeline.ScopeResolver   = (*Client)(nil)
	_ pipeline.FleetSource     = (*Client)(nil)
	_ pipeline.PermissionError = (*APIError)(nil)
)

// PermissionDenied reports a 403 for a valid token without permission for
// the resource (an ordinary token reading organizations), as opposed to the
// 403 (code 403003) of a range past retention.
func (e *APIError) PermissionDenied() bool {
	return e.Status == http.StatusForbidden && e.Code != CodeRetention
}

// GroupDeviceIDs returns the ids of a device group's members (group is an id
// or a `~label`), from GET /device_groups/{key}/devices/, all pages.
func (c *Client) GroupDeviceIDs(ctx context.Context, group string) ([]string, error) {
	ids := []string{}
	err := c.DeviceGroupDevices(ctx, group, func(d pipeline.Device) error {
		ids = append(ids, d.ID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// OrganizationDeviceIDs returns the ids of an organization's devices (org is
// an id or a `~label`), from GET /organizations/{key}/devices/, which an
// ordinary token may read.
func (c *Client) OrganizationDeviceIDs(ctx context.Context, org string) ([]string, error) {
	ids := []string{}
	err := c.OrganizationDevices(ctx, org, func(d pipeline.Device) error {
		ids = append(ids, d.ID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// ListDeviceGroups is DeviceGroups in the pipeline's terms. Members is left
// empty: the group representation's `devices` field is not documented
// beyond being an array, so members come from GroupDeviceIDs.
func (c *Client) ListDeviceGroups(ctx context.Context, fn func(pipeline.DeviceGroup) error) error {
	return c.DeviceGroups(ctx, func(g DeviceGroup) error {
		tags := g.Tags
		if tags == nil {
			tags = []string{}
		}
		return fn(pipeline.DeviceGroup{ID: g.ID, Label: g.Label, Name: g.Name, URL: g.URL,
			Organization: g.Organization, Tags: tags, CreatedAt: g.CreatedAt})
	})
}

// ListOrganizations is Organizations in the pipeline's terms. With an
// ordinary token it fails with a 403 *APIError whose PermissionDenied is
// true.
func (c *Client) ListOrganizations(ctx context.Context, fn func(pipeline.Organization) error) error {
	return c.Organizations(ctx, func(o Organization) error {
		return fn(pipeline.Organization{ID: o.ID, Label: o.Label, Name: o.Name, URL: o.URL, CreatedAt: o.CreatedAt})
	})
}

// ListEventLogs is EventLogs in the pipeline's terms, with the Client's
// page size sent explicitly. Raw is the log object as compact JSON.
func (c *Client) ListEventLogs(ctx context.Context, event string, fn func(pipeline.EventLog) error) error {
	return c.EventLogs(ctx, event, 0, func(l EventLog) error {
		return fn(pipeline.EventLog{Event: event, ID: l.ID, CreatedAt: l.CreatedAt, Raw: object(l.Raw)})
	})
}
