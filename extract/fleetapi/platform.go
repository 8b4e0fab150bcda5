package fleetapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Endpoint labels of the metrics: bounded route names, never ids.
const (
	epOrganizations          = "organizations"
	epOrganization           = "organization"
	epOrganizationDevices    = "organization_devices"
	epOrganizationDashboards = "organization_dashboards"
	epDeviceGroups           = "device_groups"
	epDeviceGroup            = "device_group"
	epDeviceGroupDevices     = "device_group_devices"
	epDeviceGroupMembers     = "device_group_members"
	epDevices                = "devices"
	epDevice                 = "device"
	epDeviceVariables        = "device_variables"
	epDeviceVariable         = "device_variable"
	epVariables              = "variables"
	epVariable               = "variable"
	epEventLogs              = "event_logs"
	epOptions                = "options"
	epValues                 = "values"
	epValuesCSV              = "values_csv"
	epStatistics             = "statistics"
	epAggregation            = "aggregation"
	epRawSeries              = "raw_series"
)

// esc escapes one path segment (an id or a ~label; "~" stays as is).
func esc(seg string) string { return url.PathEscape(seg) }

// LabelKey is the `~<label>` key that addresses a device, event, device group
// or organization by its account-wide unique label.
func LabelKey(label string) string { return "~" + label }

func (c *Client) listQuery() url.Values {
	return url.Values{"page_size": {strconv.FormatInt(c.pageSize.Load(), 10)}}
}

// object returns raw when it is a JSON object, "{}" otherwise (null,
// absent), compacted.
func object(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return json.RawMessage("{}")
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return json.RawMessage("{}")
	}
	// A copy of its exact size: the buffer keeps spare capacity (64 bytes
	// at least), which a walk would hold for every device and variable.
	return bytes.Clone(b.Bytes())
}

// ref reads a reference to another resource given as an id string or as an
// object with an id (and maybe a label).
func ref(raw json.RawMessage) (id, label string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var o struct {
			ID    looseString `json:"id"`
			Label looseString `json:"label"`
		}
		if json.Unmarshal(raw, &o) == nil {
			return string(o.ID), string(o.Label)
		}
		return "", ""
	}
	var s looseString
	_ = s.UnmarshalJSON(raw)
	return string(s), ""
}

// rawItem is a list result kept whole (a dashboard, an event log entry),
// whose fields are not documented beyond an id.
type rawItem json.RawMessage

// UnmarshalJSON keeps a copy of b.
func (r *rawItem) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// listKey is the object's id, "" when it has none.
func (r rawItem) listKey() string {
	var head struct {
		ID looseString `json:"id"`
	}
	if json.Unmarshal(r, &head) != nil {
		return ""
	}
	return string(head.ID)
}

// deviceJSON is a device as the Platform API returns it. Every field is
// read leniently (see looseString): only those the spec lists are used.
type deviceJSON struct {
	URL          looseString     `json:"url"`
	ID           looseString     `json:"id"`
	Label        looseString     `json:"label"`
	Name         looseString     `json:"name"`
	Description  looseString     `json:"description"`
	Properties   json.RawMessage `json:"properties"`
	Tags         looseStrings    `json:"tags"`
	CreatedAt    looseTime       `json:"createdAt"`
	LastActivity looseMillis     `json:"lastActivity"`
}

func (d deviceJSON) listKey() string { return string(d.ID) }

func (d deviceJSON) device() Device {
	return Device{
		ID: string(d.ID), Label: string(d.Label), Name: string(d.Name), Description: string(d.Description), URL: string(d.URL),
		Properties: object(d.Properties), Tags: []string(d.Tags), CreatedAt: d.CreatedAt.Time(),
		LastActivityMs: int64(d.LastActivity),
	}
}

// variableJSON is a variable as the Platform API returns it. `device` is not
// among the spec's variable fields: it is used when present (an id, or an
// object with an id and label) and otherwise the caller knows the device.
type variableJSON struct {
	URL          looseString     `json:"url"`
	ID           looseString     `json:"id"`
	Label        looseString     `json:"label"`
	Name         looseString     `json:"name"`
	Properties   json.RawMessage `json:"properties"`
	Device       json.RawMessage `json:"device"`
	CreatedAt    looseTime       `json:"createdAt"`
	LastActivity looseMillis     `json:"lastActivity"`
}

func (v variableJSON) listKey() string { return string(v.ID) }

func (v variableJSON) variable() Variable {
	devID, devLabel := ref(v.Device)
	return Variable{
		ID: string(v.ID), Label: string(v.Label), Name: string(v.Name), DeviceID: devID, DeviceLabel: devLabel,
		Properties: object(v.Properties), CreatedAt: v.CreatedAt.Time(), LastActivityMs: int64(v.LastActivity),
	}
}

// Devices calls fn for every device of the account (GET /devices/, all
// pages).
func (c *Client) Devices(ctx context.Context, fn func(Device) error) error {
	return listPages(ctx, c, epDevices, c.apiURL(platformPrefix, "/devices/", c.listQuery()),
		func(d deviceJSON) error { return fn(d.device()) })
}

// Device reads one device by id or `~label`.
func (c *Client) Device(ctx context.Context, key string) (Device, error) {
	var d deviceJSON
	if err := c.getJSON(ctx, epDevice, c.apiURL(platformPrefix, "/devices/"+esc(key)+"/", nil), &d); err != nil {
		return Device{}, fmt.Errorf("device %s: %w", key, err)
	}
	return d.device(), nil
}

// deviceKey addresses d by id, or by label when the id is unknown.
func deviceKey(d Device) string {
	if d.ID != "" {
		return d.ID
	}
	return LabelKey(d.Label)
}

// Variables calls fn for every variable of the device (GET
// /devices/{key}/variables/, all pages). DeviceID and DeviceLabel come from
// the response, or from d when the response does not say.
func (c *Client) Variables(ctx context.Context, d Device, fn func(Variable) error) error {
	key := deviceKey(d)
	err := listPages(ctx, c, epDeviceVariables, c.apiURL(platformPrefix, "/devices/"+esc(key)+"/variables/", c.listQuery()),
		func(vj variableJSON) error {
			v := vj.variable()
			if v.DeviceID == "" {
				v.DeviceID = d.ID
			}
			if v.DeviceLabel == "" {
				v.DeviceLabel = d.Label
			}
			return fn(v)
		})
	if err != nil {
		return fmt.Errorf("variables of device %s: %w", key, err)
	}
	return nil
}

// AllVariables calls fn for every variable of the account (GET /variables/,
// all pages). The spec does not list a variable's device among its fields:
// DeviceID and DeviceLabel are filled only when the service names the
// device (a `device` id or object), and are empty otherwise; Variables, per
// device, always knows them.
func (c *Client) AllVariables(ctx context.Context, fn func(Variable) error) error {
	return listPages(ctx, c, epVariables, c.apiURL(platformPrefix, "/variables/", c.listQuery()),
		func(v variableJSON) error { return fn(v.variable()) })
}

// DeviceVariable reads one variable addressed by its label under its device
// (GET /devices/{device_key}/variables/~{label}/), the only way to address a
// variable by label, since variable labels are unique only within a device.
func (c *Client) DeviceVariable(ctx context.Context, deviceKey, label string) (Variable, error) {
	var v variableJSON
	u := c.apiURL(platformPrefix, "/devices/"+esc(deviceKey)+"/variables/"+esc(LabelKey(label))+"/", nil)
	if err := c.getJSON(ctx, epDeviceVariable, u, &v); err != nil {
		return Variable{}, fmt.Errorf("variable ~%s of device %s: %w", label, deviceKey, err)
	}
	return v.variable(), nil
}

// VariableDetail is a variable with its most recent reading.
type VariableDetail struct {
	Variable
	// LastValue is the newest point when the service gave it as a data
	// point (an object with a timestamp and a value); nil otherwise.
	LastValue *Point
	// LastValueRaw is the last-value field exactly as the service gave it
	// (whatever its shape), nil when the response has none.
	LastValueRaw json.RawMessage
}

// lastValueKey tells whether a response key names the last value. The spec
// says only that the variable comes back "with its last value", not under
// which key, so lastValue, last_value and similar spellings all count.
func lastValueKey(k string) bool {
	k = strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(k))
	return k == "lastvalue"
}

// Variable reads one variable by id (GET /variables/{id}/) with its last
// value. The path takes an id only: the service answers a `~label` with 400
// (code 400001).
func (c *Client) Variable(ctx context.Context, id string) (VariableDetail, error) {
	var raw map[string]json.RawMessage
	if err := c.getJSON(ctx, epVariable, c.apiURL(platformPrefix, "/variables/"+esc(id)+"/", nil), &raw); err != nil {
		return VariableDetail{}, fmt.Errorf("variable %s: %w", id, err)
	}
	return variableDetail(raw), nil
}

// variableDetail reads a variable object with its last value, whose key and
// shape the spec does not give: a data point object gives LastValue, and
// any shape is kept in LastValueRaw.
func variableDetail(raw map[string]json.RawMessage) VariableDetail {
	var v variableJSON
	b, _ := json.Marshal(raw)
	_ = json.Unmarshal(b, &v) // every field of variableJSON is lenient
	out := VariableDetail{Variable: v.variable()}
	for k, lv := range raw {
		if !lastValueKey(k) {
			continue
		}
		lv = bytes.TrimSpace(lv)
		if len(lv) == 0 || string(lv) == "null" {
			continue
		}
		out.LastValueRaw = lv
		if lv[0] == '{' {
			var p valueJSON
			if json.Unmarshal(lv, &p) == nil {
				if pt, ok := p.point(); ok {
					out.LastValue = &pt
				}
			}
		}
	}
	return out
}

// DeviceGroup is a cluster of devices inside an organization.
type DeviceGroup struct {
	ID, Label, Name, URL string
	// Organization is the owning organization's id.
	Organization string
	Tags         []string
	// DeviceIDs lists the members when the representation includes them.
	DeviceIDs []string
	CreatedAt time.Time
}

// groupJSON is a device group; its fields are read leniently.
type groupJSON struct {
	URL          looseString     `json:"url"`
	ID           looseString     `json:"id"`
	Label        looseString     `json:"label"`
	Name         looseString     `json:"name"`
	Organization json.RawMessage `json:"organization"`
	Tags         looseStrings    `json:"tags"`
	Devices      json.RawMessage `json:"devices"`
	CreatedAt    looseTime       `json:"createdAt"`
}

func (g groupJSON) listKey() string { return string(g.ID) }

func (g groupJSON) group() DeviceGroup {
	org, _ := ref(g.Organization)
	out := DeviceGroup{ID: string(g.ID), Label: string(g.Label), Name: string(g.Name), URL: string(g.URL),
		Organization: org, Tags: []string(g.Tags), CreatedAt: g.CreatedAt.Time()}
	var members []json.RawMessage
	if json.Unmarshal(g.Devices, &members) == nil {
		for _, m := range members {
			if id, _ := ref(m); id != "" {
				out.DeviceIDs = append(out.DeviceIDs, id)
			}
		}
	}
	return out
}

// DeviceGroups calls fn for every device group (GET /device_groups/).
func (c *Client) DeviceGroups(ctx context.Context, fn func(DeviceGroup) error) error {
	return listPages(ctx, c, epDeviceGroups, c.apiURL(platformPrefix, "/device_groups/", c.listQuery()),
		func(g groupJSON) error { return fn(g.group()) })
}

// DeviceGroup reads one device group by id or `~label`.
func (c *Client) DeviceGroup(ctx context.Context, key string) (DeviceGroup, error) {
	var g groupJSON
	if err := c.getJSON(ctx, epDeviceGroup, c.apiURL(platformPrefix, "/device_groups/"+esc(key)+"/", nil), &g); err != nil {
		return DeviceGroup{}, fmt.Errorf("device group %s: %w", key, err)
	}
	return g.group(), nil
}

// DeviceGroupDevices calls fn for every member device of a group (GET
// /device_groups/{key}/devices/).
func (c *Client) DeviceGroupDevices(ctx context.Context, key string, fn func(Device) error) error {
	u := c.apiURL(platformPrefix, "/device_groups/"+esc(key)+"/devices/", c.listQuery())
	if err := listPages(ctx, c, epDeviceGroupDevices, u, func(d deviceJSON) error { return fn(d.device()) }); err != nil {
		return fmt.Errorf("devices of group %s: %w", key, err)
	}
	return nil
}

// Organization is a sub-account, a hard access boundary.
type Organization struct {
	ID, Label, Name, URL string
	CreatedAt            time.Time
}

// orgJSON is an organization; the spec shows only id, label and createdAt,
// so every field is read leniently.
type orgJSON struct {
	URL       looseString `json:"url"`
	ID        looseString `json:"id"`
	Label     looseString `json:"label"`
	Name      looseString `json:"name"`
	CreatedAt looseTime   `json:"createdAt"`
}

func (o orgJSON) listKey() string { return string(o.ID) }

func (o orgJSON) org() Organization {
	return Organization{ID: string(o.ID), Label: string(o.Label), Name: string(o.Name), URL: string(o.URL), CreatedAt: o.CreatedAt.Time()}
}

// Organizations calls fn for every organization (GET /organizations/). It
// needs an organization- or account-scoped token; an ordinary one gets a
// 403 *APIError with a detail and no code, which is kept for that token:
// asked again with it, the client answers the same without a request. A
// new token (a rotation through the token file) is asked afresh.
func (c *Client) Organizations(ctx context.Context, fn func(Organization) error) error {
	h, ok := c.tokenHash()
	if ok {
		if err := c.orgsDenied.seen(h); err != nil {
			return err
		}
	}
	err := listPages(ctx, c, epOrganizations, c.apiURL(platformPrefix, "/organizations/", c.listQuery()),
		func(o orgJSON) error { return fn(o.org()) })
	if ok {
		c.orgsDenied.note(h, err)
	}
	return err
}

// Organization reads one organization by id or `~label`; the same token rule
// as Organizations applies.
func (c *Client) Organization(ctx context.Context, key string) (Organization, error) {
	var o orgJSON
	if err := c.getJSON(ctx, epOrganization, c.apiURL(platformPrefix, "/organizations/"+esc(key)+"/", nil), &o); err != nil {
		return Organization{}, fmt.Errorf("organization %s: %w", key, err)
	}
	return o.org(), nil
}

// OrganizationDevices calls fn for every device of an organization (GET
// /organizations/{key}/devices/), which an ordinary token may read. Each
// device's Organization is set to key when key is an id.
func (c *Client) OrganizationDevices(ctx context.Context, key string, fn func(Device) error) error {
	org := key
	if strings.HasPrefix(key, "~") {
		org = ""
	}
	u := c.apiURL(platformPrefix, "/organizations/"+esc(key)+"/devices/", c.listQuery())
	err := listPages(ctx, c, epOrganizationDevices, u, func(dj deviceJSON) error {
		d := dj.device()
		d.Organization = org
		return fn(d)
	})
	if err != nil {
		return fmt.Errorf("devices of organization %s: %w", key, err)
	}
	return nil
}

// Dashboard is an organization's dashboard. Its fields are not documented
// beyond these, so the whole object is kept in Raw.
type Dashboard struct {
	ID, Label, Name string
	Raw             json.RawMessage
}

// OrganizationDashboards calls fn for every dashboard of an organization
// (GET /organizations/{key}/dashboards/), which an ordinary token may read.
func (c *Client) OrganizationDashboards(ctx context.Context, key string, fn func(Dashboard) error) error {
	u := c.apiURL(platformPrefix, "/organizations/"+esc(key)+"/dashboards/", c.listQuery())
	err := listPages(ctx, c, epOrganizationDashboards, u, func(item rawItem) error {
		raw := json.RawMessage(item)
		var head struct {
			ID    looseString `json:"id"`
			Label looseString `json:"label"`
			Name  looseString `json:"name"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return &DecodeError{Frame: -1, Row: -1, Msg: "a dashboard is not an object", Err: err}
		}
		return fn(Dashboard{ID: string(head.ID), Label: string(head.Label), Name: string(head.Name), Raw: raw})
	})
	if err != nil {
		return fmt.Errorf("dashboards of organization %s: %w", key, err)
	}
	return nil
}

// EventLog is one entry of an event's log history. Its fields beyond id and
// createdAt are not documented, so the whole object is kept in Raw.
type EventLog struct {
	ID        string
	CreatedAt time.Time
	Raw       json.RawMessage
}

// EventLogs calls fn for every log entry of an event (GET
// /events/{key}/logs/), following the cursor envelope's `next` verbatim and
// never building a cursor. pageSize is sent explicitly, since the service has
// no default page size and otherwise returns the whole history at once: 0
// means the Client's PageSize, and a negative pageSize sends none (one
// response with everything).
func (c *Client) EventLogs(ctx context.Context, eventKey string, pageSize int, fn func(EventLog) error) error {
	if pageSize == 0 {
		pageSize = int(c.pageSize.Load())
	}
	q := url.Values{}
	if pageSize > 0 {
		q.Set("page_size", strconv.Itoa(pageSize))
	}
	u := c.apiURL(platformPrefix, "/events/"+esc(eventKey)+"/logs/", q)
	err := listPages(ctx, c, epEventLogs, u, func(item rawItem) error {
		raw := json.RawMessage(item)
		var head struct {
			ID        looseString `json:"id"`
			CreatedAt looseTime   `json:"createdAt"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return &DecodeError{Frame: -1, Row: -1, Msg: "an event log entry is not an object", Err: err}
		}
		return fn(EventLog{ID: string(head.ID), CreatedAt: head.CreatedAt.Time(), Raw: raw})
	})
	if err != nil {
		return fmt.Errorf("logs of event %s: %w", eventKey, err)
	}
	return nil
}

// Describe sends OPTIONS to a Platform API path (relative to /api/v2.0,
// for example "/devices/") and returns the service's JSON description:
// `name` and `actions` keyed by method.
func (c *Client) Describe(ctx context.Context, path string) (json.RawMessage, error) {
	var out json.RawMessage
	u := c.apiURL(platformPrefix, path, nil)
	err := c.do(ctx, &call{method: http.MethodOptions, endpoint: epOptions, u: u, accept: "application/json",
		handle: func(_ *http.Response, body io.Reader) error { return decodeJSON(body, &out) }})
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", path, err)
	}
	return out, nil
}
