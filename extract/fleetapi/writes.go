package fleetapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// The sync only reads; these few writes exist for the device-group
// management the Platform API documents (and the tools built on it). Creates
// and membership changes are not idempotent, so they are retried only after
// a 429 or a 401, which the service answers without acting.

// DeviceGroupInput is the body of a device group creation.
type DeviceGroupInput struct {
	Label string `json:"label"`
	Name  string `json:"name,omitempty"`
	// Organization is the owning organization's id or `~label`.
	Organization string   `json:"organization"`
	Tags         []string `json:"tags"`
}

// DeviceRef names a device in an assign or remove request, in one of the
// three identifier forms the service accepts (they may be mixed).
type DeviceRef struct {
	id, label string
	object    bool
}

// DeviceByID names a device by its id (sent as a string).
func DeviceByID(id string) DeviceRef { return DeviceRef{id: id} }

// DeviceByLabel names a device by its label (sent as "~label").
func DeviceByLabel(label string) DeviceRef { return DeviceRef{label: label} }

// DeviceByIDObject names a device by its id sent as an object {"id": ...}.
func DeviceByIDObject(id string) DeviceRef { return DeviceRef{id: id, object: true} }

// MarshalJSON renders the reference in its form.
func (r DeviceRef) MarshalJSON() ([]byte, error) {
	switch {
	case r.label != "":
		return json.Marshal(LabelKey(r.label))
	case r.object:
		return json.Marshal(map[string]string{"id": r.id})
	default:
		return json.Marshal(r.id)
	}
}

// send runs a write with a JSON body (nil for none) and decodes the answer
// into out (nil to discard it).
func (c *Client) send(ctx context.Context, method, endpoint string, u *url.URL, unsafe bool, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode the request body: %w", err)
		}
	}
	return c.do(ctx, &call{method: method, endpoint: endpoint, u: u, body: body, accept: "application/json", unsafe: unsafe,
		handle: func(_ *http.Response, r io.Reader) error {
			if out == nil {
				return nil
			}
			return decodeJSON(r, out)
		}})
}

// CreateDeviceGroup creates an (empty) device group.
func (c *Client) CreateDeviceGroup(ctx context.Context, in DeviceGroupInput) (DeviceGroup, error) {
	if in.Tags == nil {
		in.Tags = []string{}
	}
	var g groupJSON
	if err := c.send(ctx, http.MethodPost, epDeviceGroups, c.apiURL(platformPrefix, "/device_groups/", nil), true, in, &g); err != nil {
		return DeviceGroup{}, fmt.Errorf("create device group %s: %w", in.Label, err)
	}
	return g.group(), nil
}

// UpdateDeviceGroup PATCHes a device group with exactly the given fields.
// The service silently ignores `devices`: membership changes only through
// AssignDevices and RemoveDevices.
func (c *Client) UpdateDeviceGroup(ctx context.Context, key string, fields map[string]any) (DeviceGroup, error) {
	var g groupJSON
	if err := c.send(ctx, http.MethodPatch, epDeviceGroup, c.apiURL(platformPrefix, "/device_groups/"+esc(key)+"/", nil), false, fields, &g); err != nil {
		return DeviceGroup{}, fmt.Errorf("update device group %s: %w", key, err)
	}
	return g.group(), nil
}

// DeleteDeviceGroup deletes a device group.
func (c *Client) DeleteDeviceGroup(ctx context.Context, key string) error {
	if err := c.send(ctx, http.MethodDelete, epDeviceGroup, c.apiURL(platformPrefix, "/device_groups/"+esc(key)+"/", nil), false, nil, nil); err != nil {
		return fmt.Errorf("delete device group %s: %w", key, err)
	}
	return nil
}

// AssignDevices adds devices to a group, or with clear replaces the whole
// membership with exactly them, and returns the members now in the group as
// the response's first page lists them (url, id, label, name, createdAt).
func (c *Client) AssignDevices(ctx context.Context, groupKey string, devices []DeviceRef, clear bool) ([]Device, error) {
	if devices == nil {
		devices = []DeviceRef{}
	}
	q := url.Values{"clear": {fmt.Sprint(clear)}}
	var page pageEnvelope[deviceJSON]
	u := c.apiURL(platformPrefix, "/device_groups/"+esc(groupKey)+"/_/assign_devices/", q)
	if err := c.send(ctx, http.MethodPost, epDeviceGroupMembers, u, true, devices, &page); err != nil {
		return nil, fmt.Errorf("assign %d devices to group %s: %w", len(devices), groupKey, err)
	}
	out := make([]Device, 0, len(page.Results))
	for _, d := range page.Results {
		out = append(out, d.device())
	}
	return out, nil
}

// RemoveDevices removes devices from a group.
func (c *Client) RemoveDevices(ctx context.Context, groupKey string, devices []DeviceRef) error {
	if devices == nil {
		devices = []DeviceRef{}
	}
	u := c.apiURL(platformPrefix, "/device_groups/"+esc(groupKey)+"/_/remove_devices/", nil)
	if err := c.send(ctx, http.MethodPost, epDeviceGroupMembers, u, true, devices, nil); err != nil {
		return fmt.Errorf("remove %d devices from group %s: %w", len(devices), groupKey, err)
	}
	return nil
}

// UpdateDevice PATCHes a device with exactly the given fields: the service
// merges `properties` key by key and replaces `tags` whole.
func (c *Client) UpdateDevice(ctx context.Context, key string, fields map[string]any) (Device, error) {
	var d deviceJSON
	if err := c.send(ctx, http.MethodPatch, epDevice, c.apiURL(platformPrefix, "/devices/"+esc(key)+"/", nil), false, fields, &d); err != nil {
		return Device{}, fmt.Errorf("update device %s: %w", key, err)
	}
	return d.device(), nil
}
