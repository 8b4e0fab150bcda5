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
