package fleetsim

import (
	"net/http"
)

// describe is what OPTIONS returns for a route: its name and the fields of
// the resource it serves.
type describe struct {
	name   string
	fields []field
}

// field is one entry of an OPTIONS description.
type field struct {
	name      string
	typ       string
	required  bool
	readOnly  bool
	label     string
	maxLength int // 0 = unbounded
}

// named is the description of a named resource: url, id, label and name,
// as every one but the group (whose label is required) starts, then rest.
func named(rest ...field) []field {
	return append([]field{
		{name: "url", typ: "string", readOnly: true, label: "Url"},
		{name: "id", typ: "string", readOnly: true, label: "Id"},
		{name: "label", typ: "string", label: "Label", maxLength: 100},
		{name: "name", typ: "string", label: "Name", maxLength: 200},
	}, rest...)
}

// Fields more than one description has.
var (
	createdAtField    = field{name: "createdAt", typ: "datetime", readOnly: true, label: "Created at"}
	descriptionField  = field{name: "description", typ: "string", label: "Description"}
	propertiesField   = field{name: "properties", typ: "nested object", label: "Properties"}
	lastActivityField = field{name: "lastActivity", typ: "integer", readOnly: true, label: "Last activity"}
)

var orgFields = named(createdAtField)

var dashboardFields = named(
	field{name: "organization", typ: "field", readOnly: true, label: "Organization"},
	createdAtField,
)

var deviceFields = named(
	descriptionField,
	propertiesField,
	field{name: "tags", typ: "list", label: "Tags"},
	createdAtField,
	lastActivityField,
	field{name: "variablesCount", typ: "integer", readOnly: true, label: "Variables count"},
)

var variableFields = named(
	descriptionField,
	propertiesField,
	field{name: "device", typ: "nested object", readOnly: true, label: "Device"},
	createdAtField,
	lastActivityField,
	field{name: "lastValue", typ: "nested object", readOnly: true, label: "Last value"},
)

var groupFields = []field{
	{name: "url", typ: "string", readOnly: true, label: "Url"},
	{name: "id", typ: "string", readOnly: true, label: "Id"},
	{name: "label", typ: "string", required: true, label: "Label", maxLength: 100},
	{name: "name", typ: "string", label: "Name", maxLength: 200},
	{name: "organization", typ: "field", required: true, label: "Organization"},
	{name: "tags", typ: "list", label: "Tags"},
	{name: "devices", typ: "list", readOnly: true, label: "Devices"},
	createdAtField,
}

var memberFields = []field{
	{name: "id", typ: "string", required: true, label: "Device id or ~label"},
}

var eventLogFields = []field{
	{name: "id", typ: "string", readOnly: true, label: "Id"},
	createdAtField,
	{name: "value", typ: "float", readOnly: true, label: "Value"},
	{name: "device", typ: "field", readOnly: true, label: "Device"},
	{name: "variable", typ: "field", readOnly: true, label: "Variable"},
	{name: "message", typ: "string", readOnly: true, label: "Message"},
}

var valueFields = []field{
	{name: "timestamp", typ: "integer", required: true, label: "Timestamp"},
	{name: "value", typ: "float", required: true, label: "Value"},
	{name: "context", typ: "nested object", label: "Context"},
	{name: "created_at", typ: "integer", readOnly: true, label: "Created at"},
}

// seriesQuery is the description of a data query: the fields that say what
// to read, then the range, time zone, precision and limit both queries take.
func seriesQuery(what ...field) []field {
	return append(what,
		field{name: "join_dataframes", typ: "boolean", label: "Join dataframes"},
		field{name: "start", typ: "integer", label: "Start"},
		field{name: "end", typ: "integer", label: "End"},
		field{name: "tz", typ: "string", label: "Time zone"},
		field{name: "precision", typ: "integer", label: "Precision"},
		field{name: "limit", typ: "integer", label: "Limit"},
	)
}

var aggregationFields = seriesQuery(
	field{name: "variables", typ: "list", required: true, label: "Variables"},
	field{name: "aggregation", typ: "choice", required: true, label: "Aggregation"},
)

var rawSeriesFields = seriesQuery(
	field{name: "variables", typ: "list", required: true, label: "Variables"},
	field{name: "columns", typ: "list", label: "Columns"},
)

// describeRoute answers OPTIONS: the route's name and, for every method it
// serves except DELETE, the fields in declaration order.
func (s *Sim) describeRoute(w http.ResponseWriter, _ *http.Request, rt *route) {
	w.Header().Set("Allow", rt.allow())
	buf := []byte(`{"name":`)
	buf = appendJSONString(buf, rt.desc.name)
	buf = append(buf, `,"description":"","renders":["application/json"],"parses":["application/json"],"actions":{`...)
	first := true
	for _, m := range []string{"GET", "POST", "PUT", "PATCH"} {
		if _, ok := rt.methods[m]; !ok {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = appendJSONString(buf, m)
		buf = append(buf, ":{"...)
		for i, f := range rt.desc.fields {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, f.name)
			buf = append(buf, `:{"type":`...)
			buf = appendJSONString(buf, f.typ)
			buf = append(buf, `,"required":`...)
			buf = appendBool(buf, f.required)
			buf = append(buf, `,"read_only":`...)
			buf = appendBool(buf, f.readOnly)
			buf = append(buf, `,"label":`...)
			buf = appendJSONString(buf, f.label)
			if f.maxLength > 0 {
				buf = append(buf, `,"max_length":`...)
				buf = appendInt(buf, int64(f.maxLength))
			}
			buf = append(buf, '}')
		}
		buf = append(buf, '}')
	}
	buf = append(buf, "}}"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}
