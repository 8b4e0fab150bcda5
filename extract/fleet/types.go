package fleet

import (
	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline"
)

// The client's types (extract/fleetapi/types.go) and the pipeline's
// (pipeline/types.go) are mapped here field by field, not converted: a Go
// conversion between the two struct types compiles only while they are
// field-identical, which would tie the client, usable on its own, to the
// pipeline's domain model and back. A field added to one side is carried
// here or deliberately not (TestMappingsCarryEveryField says which).
// Slices and raw JSON are shared, not copied, as the conversions did: the
// client hands each callback values of its own.

// pipelineDevice is the client's device as the pipeline sees it.
func pipelineDevice(d fleetapi.Device) pipeline.Device {
	return pipeline.Device{
		ID:             d.ID,
		Label:          d.Label,
		Name:           d.Name,
		Description:    d.Description,
		URL:            d.URL,
		Properties:     d.Properties,
		Tags:           d.Tags,
		CreatedAt:      d.CreatedAt,
		LastActivityMs: d.LastActivityMs,
		Organization:   d.Organization,
	}
}

// clientDevice is the pipeline's device as the client's Variables reads
// it: the id (or label) to list its variables by, and both to name the
// device in each variable the response leaves without.
func clientDevice(d pipeline.Device) fleetapi.Device {
	return fleetapi.Device{ID: d.ID, Label: d.Label}
}

// pipelineVariable is the client's variable as the pipeline sees it.
func pipelineVariable(v fleetapi.Variable) pipeline.Variable {
	return pipeline.Variable{
		ID:             v.ID,
		Label:          v.Label,
		Name:           v.Name,
		DeviceID:       v.DeviceID,
		DeviceLabel:    v.DeviceLabel,
		Properties:     v.Properties,
		CreatedAt:      v.CreatedAt,
		LastActivityMs: v.LastActivityMs,
	}
}

// clientSeriesRequest is the pipeline's raw-series request as the client
// sends it.
func clientSeriesRequest(r pipeline.SeriesRequest) fleetapi.SeriesRequest {
	return fleetapi.SeriesRequest{VariableIDs: r.VariableIDs, Start: r.Start, End: r.End, Limit: r.Limit}
}

// pipelinePoint is the client's decoded point as the pipeline loads it. Its
// context is still the decoder's buffer, valid only during the callback.
func pipelinePoint(p fleetapi.Point) pipeline.Point {
	return pipeline.Point{
		TsMs:    p.TsMs,
		Value:   p.Value,
		Context: p.Context,
		Lat:     p.Lat,
		Lng:     p.Lng,
		HasLat:  p.HasLat,
		HasLng:  p.HasLng,
	}
}
