package fleet

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline"
)

// fillFields sets every field of the struct *p to a value of its own
// (derived from the field's index), so that a field the mapping drops or
// swaps shows in the result.
func fillFields(t *testing.T, p any) {
	t.Helper()
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Interface().(type) {
		case string:
			f.SetString(fmt.Sprintf("field-%d", i))
		case int64, int:
			f.SetInt(int64(1000 + i))
		case float64:
			f.SetFloat(float64(i) + 0.5)
		case bool:
			f.SetBool(true)
		case json.RawMessage:
			f.Set(reflect.ValueOf(json.RawMessage(fmt.Sprintf(`{"field":%d}`, i))))
		case []string:
			f.Set(reflect.ValueOf([]string{fmt.Sprintf("field-%d", i)}))
		case []byte:
			f.SetBytes([]byte(fmt.Sprintf(`{"field":%d}`, i)))
		case time.Time:
			f.Set(reflect.ValueOf(time.UnixMilli(int64(1_700_000_000_000 + i)).UTC()))
		default:
			t.Fatalf("fillFields: %s.%s has type %s; teach the test to fill it", v.Type(), v.Type().Field(i).Name, f.Type())
		}
	}
}

// TestMappingsCarryEveryField checks each mapping between the client's
// types and the pipeline's: every field of the source that the target has
// under the same name arrives unchanged unless the mapping drops it on
// purpose (dropped), and every other field on either side is one the
// mapping leaves out on purpose (onlyFrom, onlyTo). A field added to both
// types, or to one, fails here until the mapping says what becomes of it.
func TestMappingsCarryEveryField(t *testing.T) {
	cases := []struct {
		name     string
		from     any // a pointer to the source struct
		mapped   func(from any) any
		onlyFrom []string
		onlyTo   []string
		// dropped are the fields both types have that the mapping
		// leaves at their zero value on purpose.
		dropped []string
	}{
		{name: "pipelineDevice", from: &fleetapi.Device{},
			mapped: func(f any) any { return pipelineDevice(*f.(*fleetapi.Device)) }},
		{name: "clientDevice", from: &pipeline.Device{},
			mapped:  func(f any) any { return clientDevice(*f.(*pipeline.Device)) },
			dropped: []string{"Name", "Description", "URL", "Properties", "Tags", "CreatedAt", "LastActivityMs", "Organization"}},
		{name: "pipelineVariable", from: &fleetapi.Variable{},
			mapped: func(f any) any { return pipelineVariable(*f.(*fleetapi.Variable)) }},
		{name: "pipelinePoint", from: &fleetapi.Point{},
			mapped: func(f any) any { return pipelinePoint(*f.(*fleetapi.Point)) }},
		{name: "clientSeriesRequest", from: &pipeline.SeriesRequest{},
			mapped: func(f any) any { return clientSeriesRequest(*f.(*pipeline.SeriesRequest)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fillFields(t, c.from)
			from := reflect.ValueOf(c.from).Elem()
			to := reflect.ValueOf(c.mapped(c.from))
			for i := range to.NumField() {
				name := to.Type().Field(i).Name
				src := from.FieldByName(name)
				if !src.IsValid() {
					if !slices.Contains(c.onlyTo, name) {
						t.Errorf("%s.%s has no field of that name in %s to come from", to.Type(), name, from.Type())
					}
					continue
				}
				if slices.Contains(c.dropped, name) {
					if !to.Field(i).IsZero() {
						t.Errorf("%s.%s = %v, want it left zero", to.Type(), name, to.Field(i).Interface())
					}
					continue
				}
				if !reflect.DeepEqual(src.Interface(), to.Field(i).Interface()) {
					t.Errorf("%s.%s = %v, want %s.%s = %v", to.Type(), name, to.Field(i).Interface(), from.Type(), name, src.Interface())
				}
			}
			for i := range from.NumField() {
				name := from.Type().Field(i).Name
				if !to.FieldByName(name).IsValid() && !slices.Contains(c.onlyFrom, name) {
					t.Errorf("%s.%s has no field of that name in %s to go to", from.Type(), name, to.Type())
				}
			}
		})
	}
}
