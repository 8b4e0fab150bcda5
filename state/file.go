package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// fileFormat is the version of the state file's layout.
const fileFormat = 1

// File keeps the marks in a JSON file. Writes are atomic (a temporary file in
// the same directory, fsynced, renamed over the old one, directory fsynced),
// so a crash leaves either the old or the new marks, never a torn file.
// Commits from several processes are serialised by an flock on PATH.lock;
// the sync lease lives in PATH.lease (PATH.shard-N.lease for shard N, see
// SetLease).
type File struct {
	path string
	// lease is the name of the lease Acquire takes (pipeline.Shard.LeaseName).
	lease string
	// mu serialises this process's commits; the flock serialises processes.
	mu sync.Mutex
}

// NewFile returns a store for the file at path. The file need not exist yet;
// its directory must.
func NewFile(path string) *File { return &File{path: path} }

// Path is the state file's path.
func (f *File) Path() string { return f.path }

// CorruptFileError is a state file that cannot be read as marks.
type CorruptFileError struct {
	Path string
	Err  error
}

func (e *CorruptFileError) Error() string {
	return fmt.Sprintf("state file %s is corrupt (%v): restore it from a backup, or delete it to re-read every variable from the retention floor (points loaded twice are deduplicated)", e.Path, e.Err)
}

func (e *CorruptFileError) Unwrap() error { return e.Err }

type fileDoc struct {
	Format int                 `json:"format"`
	Marks  map[string]fileMark `json:"marks"`
	// Rates are the request rates learned per source and token (rates.go).
	Rates map[string]Rate `json:"rates,omitempty"`
}

type fileMark struct {
	HwmMs          int64     `json:"hwm_ms"`
	LastActivityMs int64     `json:"last_activity_ms"`
	CheckedMs      int64     `json:"checked_ms,omitempty"`
	FutureMs       int64     `json:"future_ms,omitempty"`
	RereadMs       int64     `json:"reread_ms,omitempty"`
	RecheckedMs    int64     `json:"rechecked_ms,omitempty"`
	LookbackMs     int64     `json:"lookback_ms,omitempty"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Load returns every stored mark; a missing file is an empty state.
func (f *File) Load(ctx context.Context) (map[string]pipeline.Mark, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return f.read()
}

// MarksOf hands fn the stored mark of each of ids that has one. The file
// is read whole anyway; only its marks are not kept beside the caller's.
func (f *File) MarksOf(ctx context.Context, ids []string, fn func(pipeline.Mark) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	doc, err := f.readDoc()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if m, ok := doc.Marks[id]; ok {
			if err := fn(m.mark(id)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *File) read() (map[string]pipeline.Mark, error) {
	doc, err := f.readDoc()
	if err != nil {
		return nil, err
	}
	marks := make(map[string]pipeline.Mark, len(doc.Marks))
	for id, m := range doc.Marks {
		marks[id] = m.mark(id)
	}
	return marks, nil
}

func (m fileMark) mark(id string) pipeline.Mark {
	return pipeline.Mark{VariableID: id, HwmMs: m.HwmMs, LastActivityMs: m.LastActivityMs, CheckedMs: m.CheckedMs, FutureMs: m.FutureMs, RereadMs: m.RereadMs, RecheckedMs: m.RecheckedMs, LookbackMs: m.LookbackMs, UpdatedAt: m.UpdatedAt}
}

func newFileMark(m pipeline.Mark) fileMark {
	return fileMark{HwmMs: m.HwmMs, LastActivityMs: m.LastActivityMs, CheckedMs: m.CheckedMs, FutureMs: m.FutureMs, RereadMs: m.RereadMs, RecheckedMs: m.RecheckedMs, LookbackMs: m.LookbackMs, UpdatedAt: m.UpdatedAt.UTC()}
}

// readDoc reads and checks the whole file; a missing file is an empty doc.
func (f *File) readDoc() (*fileDoc, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return &fileDoc{Format: fileFormat, Marks: map[string]fileMark{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state file: %w", err)
	}
	var doc fileDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, &CorruptFileError{Path: f.path, Err: err}
	}
	if doc.Format != fileFormat {
		return nil, &CorruptFileError{Path: f.path, Err: fmt.Errorf("format %d, want %d", doc.Format, fileFormat)}
	}
	if _, ok := doc.Marks[""]; ok {
		return nil, &CorruptFileError{Path: f.path, Err: errors.New("a mark without a variable id")}
	}
	if doc.Marks == nil {
		doc.Marks = map[string]fileMark{}
	}
	return &doc, nil
}

// write replaces the file with doc.
func (f *File) write(doc *fileDoc) error {
	data, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	return writeAtomic(f.path, append(data, '\n'))
}

// Commit merges marks into the file, keeping for each variable the greater
// HwmMs of the stored and the given mark, and replaces the file atomically.
func (f *File) Commit(ctx context.Context, marks []pipeline.Mark) error {
	if len(marks) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	unlock, err := lockFile(ctx, f.path+".lock")
	if err != nil {
		return fmt.Errorf("commit marks to %s: %w", f.path, err)
	}
	defer unlock()

	doc, err := f.readDoc()
	if err != nil {
		return fmt.Errorf("commit marks: %w", err)
	}
	now := time.Now().UTC()
	for _, m := range marks {
		if m.UpdatedAt.IsZero() {
			m.UpdatedAt = now
		}
		old, ok := doc.Marks[m.VariableID]
		doc.Marks[m.VariableID] = newFileMark(pipeline.MergeMark(old.mark(m.VariableID), ok, m))
	}
	if err := f.write(doc); err != nil {
		return fmt.Errorf("commit marks to %s: %w", f.path, err)
	}
	return nil
}

// writeAtomic replaces path with data so that a reader or a crash sees the
// old or the new content, never a mix.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockFile takes an exclusive flock on path, polling until ctx ends, and
// returns the function that releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { fh.Close() }, nil // closing drops the flock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			fh.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			fh.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
