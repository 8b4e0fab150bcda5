package pipelinetest

import (
	"context"
	"maps"
	"sync"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Store is a state store in memory: it keeps the marks, each commit
// merged with the stored mark by pipeline.MergeMark so that none moves
// backwards. Its zero value is ready; set the hook before use.
type Store struct {
	// OnCommit, when set, is called for every Commit; an error it returns
	// is Commit's, and no mark is stored. It is handed Commit's context
	// (a store fails when it is done).
	OnCommit func(ctx context.Context, marks []pipeline.Mark) error

	mu      sync.Mutex
	marks   map[string]pipeline.Mark
	loads   int
	marksOf int
	asked   int
}

// NewStore is a Store holding marks, as if committed earlier.
func NewStore(marks ...pipeline.Mark) *Store {
	s := &Store{}
	s.Set(marks...)
	return s
}

// Set stores marks as they are, not merged.
func (s *Store) Set(marks ...pipeline.Mark) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marks == nil {
		s.marks = map[string]pipeline.Mark{}
	}
	for _, m := range marks {
		s.marks[m.VariableID] = m
	}
}

// Marks returns a copy of the stored marks by variable id, uncounted by
// Loads.
func (s *Store) Marks() map[string]pipeline.Mark {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.marks)
}

// Mark returns the stored mark of variable id.
func (s *Store) Mark(id string) (pipeline.Mark, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.marks[id]
	return m, ok
}

// Load returns every stored mark.
func (s *Store) Load(context.Context) (map[string]pipeline.Mark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	out := maps.Clone(s.marks)
	if out == nil {
		out = map[string]pipeline.Mark{}
	}
	return out, nil
}

// MarksOf hands fn the stored mark of each of ids that has one.
func (s *Store) MarksOf(_ context.Context, ids []string, fn func(pipeline.Mark) error) error {
	s.mu.Lock()
	s.marksOf++
	s.asked += len(ids)
	var found []pipeline.Mark
	for _, id := range ids {
		if m, ok := s.marks[id]; ok {
			found = append(found, m)
		}
	}
	s.mu.Unlock()
	for _, m := range found {
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// Commit stores marks, each merged with the stored one by MergeMark.
func (s *Store) Commit(ctx context.Context, marks []pipeline.Mark) error {
	s.mu.Lock()
	hook := s.OnCommit
	s.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, marks); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marks == nil {
		s.marks = map[string]pipeline.Mark{}
	}
	for _, m := range marks {
		old, ok := s.marks[m.VariableID]
		s.marks[m.VariableID] = pipeline.MergeMark(old, ok, m)
	}
	return nil
}

// Loads is the number of Load calls so far.
func (s *Store) Loads() int { s.mu.Lock(); defer s.mu.Unlock(); return s.loads }

// MarksOfCalls is the number of MarksOf calls so far, and the number of
// ids they asked for.
func (s *Store) MarksOfCalls() (calls, ids int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marksOf, s.asked
}
