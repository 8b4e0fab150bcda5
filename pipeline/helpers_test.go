package pipeline

import (
	"context"
	"time"
)

// What only tests use: a plan of a whole walk at once, and a whole walk
// stored at once. A cycle plans and stores its walk a chunk at a time
// (sync.go, cycleWalk).

// Plan turns the in-scope variables and their marks into targets. It returns
// the targets to read and the number of variables skipped as idle.
func Plan(vars []Variable, marks map[string]Mark, o PlanOptions) (targets []Target, skipped int) {
	o.reported = lastActivityReported(vars)
	return planWith(vars, func(id string) (Mark, bool) { m, ok := marks[id]; return m, ok }, o)
}

// Snapshot is a whole walk of the in-scope fleet, for WriteSnapshot.
type Snapshot struct {
	Devices   []Device
	Variables []Variable
	// Scoped says the walk was restricted by a scope, so a device missing
	// from it may merely be out of scope rather than deleted.
	Scoped bool
	At     time.Time
}

// WriteSnapshot stores a whole walk through w, as a cycle hands it on
// page by page: for callers that hold the walk anyway.
func WriteSnapshot(ctx context.Context, w SnapshotWriter, snap Snapshot) error {
	run, err := w.BeginSnapshot(ctx, snap.Scoped, snap.At)
	if err != nil {
		return err
	}
	if err := run.Devices(ctx, snap.Devices); err != nil {
		return err
	}
	if err := run.Variables(ctx, snap.Variables); err != nil {
		return err
	}
	return run.Finish(ctx)
}
