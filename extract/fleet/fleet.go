// Package fleet is the adapter between the Fleet Telemetry API client
// (extract/fleetapi) and the sync (pipeline): it implements the pipeline's
// ports on the client (the raw series, the device and variable listings,
// scope resolution) and pipeline/metadata's (the metadata source), and
// maps the client's types to theirs (types.go). The client stays reusable
// on its own; the pipeline knows neither package.
package fleet

import (
	"context"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
)

// The ports this package implements, and the classification of the
// client's errors the pipeline relies on (it reads errors by method).
var (
	_ pipeline.Source          = (*Source)(nil)
	_ pipeline.ScopeResolver   = (*Source)(nil)
	_ metadata.RefreshSource   = (*Source)(nil)
	_ metadata.EventSource     = (*Source)(nil)
	_ pipeline.RetryableError  = (*fleetapi.APIError)(nil)
	_ pipeline.RetryableError  = (*fleetapi.TransportError)(nil)
	_ pipeline.RetryableError  = (*fleetapi.ListChangedError)(nil)
	_ pipeline.RetentionError  = (*fleetapi.RetentionError)(nil)
	_ pipeline.NotFoundError   = (*fleetapi.APIError)(nil)
	_ pipeline.ScopedError     = (*fleetapi.APIError)(nil)
	_ pipeline.ScopedError     = (*fleetapi.RetentionError)(nil)
	_ pipeline.VariableError   = (*fleetapi.APIError)(nil)
	_ pipeline.VariableError   = (*fleetapi.DecodeError)(nil)
	_ pipeline.VariableError   = (*fleetapi.TransportError)(nil)
	_ metadata.PermissionError = (*fleetapi.APIError)(nil)
)

// Options configure the walk of devices and variables.
type Options struct {
	// PerDeviceVariables lists each device's variables even where the
	// account-wide list could serve (source.variables_listing: per_device).
	PerDeviceVariables bool
	// MaxInFlight bounds the concurrent per-device listings (default 4).
	MaxInFlight int
	// Logger receives the walk's notes; nil means zap.NewNop().
	Logger *zap.Logger
}

// Source is the Fleet Telemetry Service as the pipeline sees it.
type Source struct {
	c    *fleetapi.Client
	opts Options
}

// New puts c behind the pipeline's ports.
func New(c *fleetapi.Client, opts Options) *Source {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 4
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Source{c: c, opts: opts}
}

// Walk hands the in-scope devices and their variables to sink as it lists
// them, so that a walk of a large fleet never holds its variables: the
// devices' pages first (all of them, to sink.Devices), then the
// account-wide variable list in batches when every variable there names a
// listed device, or each device's list, a device at a time, otherwise. A
// switch from the former to the latter part way hands again the variables
// handed so far (see walker.walk).
func (s *Source) Walk(ctx context.Context, scope pipeline.Scope, sink pipeline.WalkSink) error {
	return (&walker{l: s, opts: s.opts, log: s.opts.Logger}).walk(ctx, scope, sink)
}

// Client is the API client behind the adapter, for the commands that use
// more of the API than the sync does (verify's aggregates).
func (s *Source) Client() *fleetapi.Client { return s.c }

// Devices lists every device of the account (all pages).
func (s *Source) Devices(ctx context.Context, fn func(pipeline.Device) error) error {
	return s.c.Devices(ctx, func(d fleetapi.Device) error { return fn(pipelineDevice(d)) })
}

// Variables lists the variables of d.
func (s *Source) Variables(ctx context.Context, d pipeline.Device, fn func(pipeline.Variable) error) error {
	return s.c.Variables(ctx, clientDevice(d), func(v fleetapi.Variable) error { return fn(pipelineVariable(v)) })
}

// AllVariables lists every variable of the account at once.
func (s *Source) AllVariables(ctx context.Context, fn func(pipeline.Variable) error) error {
	return s.c.AllVariables(ctx, func(v fleetapi.Variable) error { return fn(pipelineVariable(v)) })
}

// Series streams the raw series of req into sink.
func (s *Source) Series(ctx context.Context, req pipeline.SeriesRequest, sink pipeline.FrameSink) error {
	return s.c.Series(ctx, clientSeriesRequest(req), frameSink{sink})
}

// frameSink hands the client's points to the pipeline's sink, with the
// position the client's decoder read in each context as it scanned it
// (extract/fleetapi/position.go): where a point's position lies is this
// API's convention, not the pipeline's.
type frameSink struct{ s pipeline.FrameSink }

func (f frameSink) Point(i int, p fleetapi.Point) error {
	return f.s.Point(i, pipelinePoint(p))
}

func (f frameSink) EndFrame(i int, rows int) error { return f.s.EndFrame(i, rows) }
