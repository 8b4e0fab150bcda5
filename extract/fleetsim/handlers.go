package fleetsim

import (
	"fmt"
	"net/http"
	"strings"
)

// The shapes every resource handler shares: find the object the path names
// under the lock (404 when there is none), read a JSON object body.

// findByKey returns the item of list that key names, "~label" or an id;
// the zero T when none does.
func findByKey[T any](list []T, key string, id, label func(T) string) T {
	l, byLabel := strings.CutPrefix(key, "~")
	for _, x := range list {
		if (byLabel && label(x) == l) || (!byLabel && id(x) == key) {
			return x
		}
	}
	var zero T
	return zero
}

// reading runs fn under the read lock with the object lookup finds, or
// answers 404 when there is none.
func reading[T any](s *Sim, w http.ResponseWriter, lookup func() *T, fn func(*T)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if x := lookup(); x != nil {
		fn(x)
		return
	}
	errNotFound(w)
}

// writing is reading under the write lock, for handlers that change the
// object.
func writing[T any](s *Sim, w http.ResponseWriter, lookup func() *T, fn func(*T)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := lookup(); x != nil {
		fn(x)
		return
	}
	errNotFound(w)
}

// readObject reads a JSON object body; it answers malformed JSON and other
// JSON types itself, as the service does.
func readObject(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	body, ok := readBody(w, r)
	if !ok {
		return nil, false
	}
	obj, ok := body.(map[string]any)
	if !ok {
		errValidation(w, map[string][]string{"non_field_errors": {fmt.Sprintf("Invalid data. Expected a dictionary, but got %s.", jsonTypeName(body))}})
	}
	return obj, ok
}
