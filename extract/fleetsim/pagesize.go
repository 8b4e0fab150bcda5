package fleetsim

import (
	"net/http"
	"strconv"
	"strings"
)

// The spec does not give the largest page_size the service accepts. By
// default fleetsim clamps larger values (maxPageSize), as a DRF
// max_page_size does; Options.RejectPageSizeAbove serves the other reading,
// a 400 for a page_size above it, so that clients can show they cope.

// rejectsPageSize answers 400 to a Platform API GET whose page_size is
// above Options.RejectPageSizeAbove, and reports whether it did.
func (s *Sim) rejectsPageSize(w http.ResponseWriter, r *http.Request) bool {
	limit := s.opts.RejectPageSizeAbove
	if limit <= 0 || r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/api/v2.0/") {
		return false
	}
	v, err := strconv.Atoi(r.URL.Query().Get("page_size"))
	if err != nil || v <= limit {
		return false
	}
	writeJSON(w, http.StatusBadRequest, codeDetailBody{400001, "Validation Error.",
		map[string]any{"page_size": []string{"Ensure this value is less than or equal to " + strconv.Itoa(limit) + "."}}})
	return true
}
