package pipelinetest

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Writer is a warehouse in memory: the rows of an INSERT are stored, one
// per variable and timestamp (a row loaded again replaces itself, as
// FINAL shows it), only when the INSERT commits, the way ClickHouse
// acknowledges them. Its zero value is ready; set the hooks before use.
type Writer struct {
	// OnBegin, when set, is called for every Begin; an error it returns
	// is Begin's (the writer gave up connecting).
	OnBegin func() error
	// OnAppend, when set, is called with every chunk appended, before it
	// is taken; an error it returns is Append's.
	OnAppend func(chunk *pipeline.Batch) error
	// OnCommit, when set, is called for every Commit with the rows of the
	// INSERT; an error it returns is Commit's, and none of them is stored.
	OnCommit func(rows []pipeline.Row) error

	mu      sync.Mutex
	rows    map[string]map[int64]pipeline.Row
	begins  int
	appends int
	commits int
}

// Begin opens an INSERT.
func (w *Writer) Begin(context.Context) (pipeline.Insert, error) {
	w.mu.Lock()
	w.begins++
	hook := w.OnBegin
	w.mu.Unlock()
	if hook != nil {
		if err := hook(); err != nil {
			return nil, err
		}
	}
	return &insert{w: w}, nil
}

// insert is one open INSERT of a Writer.
type insert struct {
	w    *Writer
	rows []pipeline.Row
}

// Append copies the chunk's rows: the engine reuses the chunk as soon as
// Append returns.
func (in *insert) Append(c *pipeline.Batch) error {
	in.w.mu.Lock()
	in.w.appends++
	hook := in.w.OnAppend
	in.w.mu.Unlock()
	if hook != nil {
		if err := hook(c); err != nil {
			return err
		}
	}
	for i := range c.Len() {
		in.rows = append(in.rows, pipeline.Row{VariableID: c.VariableID[i], DeviceID: c.DeviceID[i], DeviceLabel: c.DeviceLabel[i],
			VariableLabel: c.VariableLabel[i], TsMs: c.TsMs[i], Value: c.Value[i], Context: c.Context[i],
			Lat: c.Lat[i], Lng: c.Lng[i], HasLat: c.HasLat[i], HasLng: c.HasLng[i]})
	}
	return nil
}

// Commit stores the INSERT's rows, unless OnCommit fails it.
func (in *insert) Commit() error {
	in.w.mu.Lock()
	in.w.commits++
	hook := in.w.OnCommit
	in.w.mu.Unlock()
	if hook != nil {
		if err := hook(in.rows); err != nil {
			return err
		}
	}
	in.w.Add(in.rows...)
	return nil
}

// Abort drops the INSERT's rows.
func (in *insert) Abort() { in.rows = nil }

// Add stores rows as a committed INSERT does, as if loaded earlier.
func (w *Writer) Add(rows ...pipeline.Row) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rows == nil {
		w.rows = map[string]map[int64]pipeline.Row{}
	}
	for _, r := range rows {
		if w.rows[r.VariableID] == nil {
			w.rows[r.VariableID] = map[int64]pipeline.Row{}
		}
		w.rows[r.VariableID][r.TsMs] = r
	}
}

// Rows returns a copy of the stored rows of variable id by timestamp.
func (w *Writer) Rows(id string) map[int64]pipeline.Row {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int64]pipeline.Row, len(w.rows[id]))
	for ts, r := range w.rows[id] {
		out[ts] = r
	}
	return out
}

// Row returns the stored row of variable id at ts.
func (w *Writer) Row(id string, ts int64) (pipeline.Row, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.rows[id][ts]
	return r, ok
}

// IDs returns the ids of the variables with a stored row, sorted.
func (w *Writer) IDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.rows))
}

// Begins, Appends and Commits count the calls of Begin, Append and Commit
// so far, failed ones included.
func (w *Writer) Begins() int { w.mu.Lock(); defer w.mu.Unlock(); return w.begins }

// Appends counts the Append calls so far (see Begins).
func (w *Writer) Appends() int { w.mu.Lock(); defer w.mu.Unlock(); return w.appends }

// Commits counts the Commit calls so far (see Begins).
func (w *Writer) Commits() int { w.mu.Lock(); defer w.mu.Unlock(); return w.commits }
