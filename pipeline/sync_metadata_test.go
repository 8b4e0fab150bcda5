package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// partialMetadata is a metadata stage whose walk is stored but whose
// Finish fails part of the rest, as pipeline/metadata's Refresh does when
// a group listing fails: it counts the variables handed on.
type partialMetadata struct {
	vars     int
	finished bool
	err      error
}

func (m *partialMetadata) BeginSnapshot(context.Context, bool, time.Time) (pipeline.SnapshotRun, error) {
	return m, nil
}

func (m *partialMetadata) Devices(context.Context, []pipeline.Device) error { return nil }

func (m *partialMetadata) Variables(_ context.Context, vars []pipeline.Variable) error {
	m.vars += len(vars)
	return nil
}

func (m *partialMetadata) Finish(context.Context) error {
	m.finished = true
	return &pipeline.MetadataError{Errs: []error{m.err}}
}

// failingEvents is an event-log stage that fails.
type failingEvents struct{ err error }

func (e failingEvents) Sync(context.Context) error { return e.err }

// A metadata stage's partial failure and the event logs' failure do not
// fail the cycle: the points are synced, and the cycle reports both in one
// *MetadataError at its end.
func TestCycleSyncsThePointsAndThenReportsAMetadataFailure(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	src, _ := pipelinetest.Fixture(6, 1, now.UnixMilli()-10_000)
	w := &pipelinetest.Writer{}
	groups, events := errors.New("list device groups: HTTP 500"), errors.New("event ~overheat: HTTP 404")
	meta := &partialMetadata{err: groups}
	s := pipeline.NewSyncer(src, w, pipeline.Stages{Metadata: meta, Events: failingEvents{events}}, &pipelinetest.Store{},
		pipeline.SyncOptions{Engine: pipeline.EngineOptions{RetryWait: time.Millisecond}, Retention: time.Hour, Now: func() time.Time { return now }}, nil, nil)
	sum, err := s.Cycle(context.Background())
	var me *pipeline.MetadataError
	if !errors.As(err, &me) {
		t.Fatalf("Cycle error %v, want a *MetadataError", err)
	}
	if !slices.Equal(me.Errs, []error{groups, events}) {
		t.Fatalf("the *MetadataError holds %v, want the metadata's failure, then the event logs'", me.Errs)
	}
	if len(w.IDs()) != 6 || sum.Completed != 6 {
		t.Fatalf("loaded %d variables (%d completed), want all 6 despite the metadata failure", len(w.IDs()), sum.Completed)
	}
	if meta.vars != 6 || !meta.finished {
		t.Fatalf("the metadata stage was handed %d variables (finished: %v), want all 6, then finished", meta.vars, meta.finished)
	}
}
