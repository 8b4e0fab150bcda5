package fleetapi

import (
	"context"
	"encoding/json"
	"net/http"
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
	err := c.DeviceGroupDevices(ctx, group, func(d Device) error {
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
	err := c.OrganizationDevices(ctx, org, func(d Device) error {
		ids = append(ids, d.ID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Object is the log entry as a compact JSON object ("{}" when the service
// gave something else): the spec documents no fields beyond id and
// createdAt, so a caller that stores logs keeps the whole object.
func (l EventLog) Object() json.RawMessage { return object(l.Raw) }
