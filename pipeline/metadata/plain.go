package metadata

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Plain is the metadata stage of a plain Writer: each part of a cycle's
// walk stored as it is, nothing marked deleted, no groups, organizations
// or events. It is for a warehouse (or a benchmark, cmd/fleetbench) that
// keeps the walk's devices and variables but not the Refresh's tables.
func Plain(w Writer) pipeline.SnapshotWriter { return plain{w} }

type plain struct{ w Writer }

func (m plain) BeginSnapshot(_ context.Context, _ bool, at time.Time) (pipeline.SnapshotRun, error) {
	return plainRun{w: m.w, at: at}, nil
}

type plainRun struct {
	w  Writer
	at time.Time
}

func (m plainRun) Devices(ctx context.Context, devices []pipeline.Device) error {
	if err := m.w.WriteDevices(ctx, devices, m.at); err != nil {
		return fmt.Errorf("store device metadata: %w", err)
	}
	return nil
}

func (m plainRun) Variables(ctx context.Context, vars []pipeline.Variable) error {
	if err := m.w.WriteVariables(ctx, vars, m.at); err != nil {
		return fmt.Errorf("store variable metadata: %w", err)
	}
	return nil
}

func (plainRun) Finish(context.Context) error { return nil }
