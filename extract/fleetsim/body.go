package fleetsim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// readBody reads and parses a JSON body; it answers malformed JSON itself.
func readBody(w http.ResponseWriter, r *http.Request) (any, bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBodySize))
	if err != nil {
		errDetail(w, http.StatusBadRequest, "Could not read the request body.")
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("Expecting value: line 1 column 1 (char 0)")
		}
		errJSONParse(w, err)
		return nil, false
	}
	if dec.More() {
		errJSONParse(w, errors.New("Extra data after the JSON value"))
		return nil, false
	}
	return v, true
}

func stringList(v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for _, x := range arr {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func numberToAny(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return float64(i)
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = numberToAny(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = numberToAny(e)
		}
		return out
	}
	return v
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case string:
		return "str"
	case json.Number:
		return "int"
	case bool:
		return "bool"
	case nil:
		return "NoneType"
	}
	return "dict"
}

// The checks below are those of the writable fields devices and groups
// share, in the service's words; each records a problem under the field's
// name and returns nil (or false) when the body lacks the field or it is
// invalid.

// labelFrom checks a label: a string, a valid label, at most 100
// characters, and not taken by another resource of the kind named by owner
// (for the message).
func labelFrom(obj map[string]any, problems map[string][]string, owner string, taken func(string) bool) *string {
	v, ok := obj["label"]
	if !ok {
		return nil
	}
	str, isStr := v.(string)
	switch {
	case !isStr:
		problems["label"] = []string{"Not a valid string."}
	case str == "" || strings.Contains(str, "/") || strings.HasPrefix(str, "~"):
		problems["label"] = []string{"Enter a valid label."}
	case len([]rune(str)) > 100:
		problems["label"] = []string{"Ensure this field has no more than 100 characters."}
	case taken(str):
		problems["label"] = []string{owner + " with this label already exists."}
	default:
		return &str
	}
	return nil
}

// nameFrom checks a name: a string of at most 200 characters.
func nameFrom(obj map[string]any, problems map[string][]string) *string {
	v, ok := obj["name"]
	if !ok {
		return nil
	}
	str, isStr := v.(string)
	switch {
	case !isStr:
		problems["name"] = []string{"Not a valid string."}
	case len([]rune(str)) > 200:
		problems["name"] = []string{"Ensure this field has no more than 200 characters."}
	default:
		return &str
	}
	return nil
}

// tagsFrom checks tags: a list of strings. set says they were sent and
// valid, since an empty list replaces the tags too.
func tagsFrom(obj map[string]any, problems map[string][]string) (tags []string, set bool) {
	v, ok := obj["tags"]
	if !ok {
		return nil, false
	}
	if t, isList := stringList(v); isList {
		return t, true
	}
	problems["tags"] = []string{"Expected a list of strings."}
	return nil, false
}
