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

var orgFields = []field{
	{name: "url", typ: "string", readOnly: true, label: "Url"},
	{name: "id", typ: "string", readOnly: true, label: "Id"},
	{name: "label", typ: "string", label: "Label", maxLength: 100},
	{name: "name", typ: "string", label: "Name", maxLength: 200},
	{name: "createdAt", typ: "datetime", readOnly: true, label: "Created at"},
}

var dashboardFields = []field{
	{name: "url", typ: "string", readOnly: true, label: "Url"},
	{name: "id", typ: "string", readOnly: true, label: "Id"},
	{name: "label", typ: "string", label: "Label", maxLength: 100},
	{name: "name", typ: "string", label: "Name", maxLength: 200},
	{name: "organization", typ: "field", readOnly: true, label: "Organization"},
	{name: "createdAt", typ: "datetime", readOnly: true, label: "Created at"},
}

var deviceFields = []field{
	{name: "url", typ: "string", readOnly: true, label: "Url"},
	{name: "id", typ: "string", readOnly: true, label: "Id"},
	{name: "label", typ: "string", label: "Label", maxLength: 100},
	{name: "name", typ: "string", label: "Name", maxLength: 200},
	{name: "description", typ: "string", label: "Description"},
	{name: "properties", typ: "nested object", label: "Properties"},
	{name: "tags", typ: "list", label: "Tags"},
	{name: "createdAt", typ: "datetime", readOnly: true, label: "Created at"},
	{name: "lastActivity", typ: "integer", readOnly: true, label: "Last activity"},
	{name: "variablesCount", typ: "integer", readOnly: true, label: "Variables count"},
}

var variableFields = []field{
	{name: "url", typ: "string", readOnly: true, label: "Url"},
	{name: "id", typ: "string", readOnly: true, label: "Id"},
	{name: "label", typ: "string", label: "Label", maxLength: 100},
	{name: "name", typ: "string", label: "Name", maxLength: 200},
	{name: "description", typ: "string", label: "Description"},
	{name: "properties", typ: "nested object", label: "Properties"},
	{name: "device", typ: "nested object", readOnly: true, label: "Device"},
	{name: "createdAt", typ: "datetime", readOnly: true, label: "Created at"},
	{name: "lastActivity", typ: "integer", readOnly: true, label: "Last activity"},
	{name: "lastValue", typ: "nested object", readOnly: true, label: "Last value"},
}

var groupFields = []field{
	{name: "url", typ: "string", readOnly: true, label: "Url"},
	{name: "id", typ: "string", readOnly: true, label: "Id"},
	{name: "label", typ: "string", required: true, label: "Label", maxLength: 100},
	{name: "name", typ: "string", label: "Name", maxLength: 200},
	{name: "organization", typ: "field", required: true, label: "Organization"},
	{name: "tags", typ: "list", label: "Tags"},
	{name: "devices", typ: "list", readOnly: true, label: "Devices"},
	{name: "createdAt", typ: "datetime", readOnly: true, label: "Created at"},
}

var memberFields = []field{
	{name: "id", typ: "string", required: true, label: "Device id or ~label"},
}

var eventLogFields = []field{
	{name: "id", typ: "string", readOnly: true, label: "Id"},
	{name: "createdAt", typ: "datetime", readOnly: true, label: "Created at"},
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

var aggregationFields = []field{
	{name: "variables", typ: "list", required: true, label: "Variables"},
	{name: "aggregation", typ: "choice", required: true, label: "Aggregation"},
	{name: "join_dataframes", typ: "boolean", label: "Join dataframes"},
	{name: "start", typ: "integer", label: "Start"},
	{name: "end", typ: "integer", label: "End"},
	{name: "tz", typ: "string", label: "Time zone"},
	{name: "precision", typ: "integer", label: "Precision"},
	{name: "limit", typ: "integer", label: "Limit"},
}

var rawSeriesFields = []field{
	{name: "variables", typ: "list", required: true, label: "Variables"},
	{name: "columns", typ: "list", label: "Columns"},
	{name: "join_dataframes", typ: "boolean", label: "Join dataframes"},
	{name: "start", typ: "integer", label: "Start"},
	{name: "end", typ: "integer", label: "End"},
	{name: "tz", typ: "string", label: "Time zone"},
	{name: "precision", typ: "integer", label: "Precision"},
	{name: "limit", typ: "integer", label: "Limit"},
}

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
