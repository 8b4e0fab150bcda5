package fleetsim

import (
	"encoding/base64"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Event logs: cursor pagination.

type cursorBody struct {
	Next     any   `json:"next"`
	Previous any   `json:"previous"`
	Results  []any `json:"results"`
}

type eventLogJSON struct {
	ID        string  `json:"id"`
	CreatedAt string  `json:"createdAt"`
	Value     float64 `json:"value"`
	Device    string  `json:"device"`
	Variable  string  `json:"variable"`
	Message   string  `json:"message"`
}

// The cursor is an opaque token carrying the offset into the newest-first
// log list; clients must follow next verbatim.
func encodeCursor(off int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o=" + strconv.Itoa(off) + "&v=1"))
}

func decodeCursor(c string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	rest, ok := strings.CutPrefix(string(b), "o=")
	if !ok {
		return 0, false
	}
	num, _, _ := strings.Cut(rest, "&")
	off, err := strconv.Atoi(num)
	return off, err == nil && off >= 0
}

func (s *Sim) listEventLogs(w http.ResponseWriter, r *http.Request, p []string, _ TokenKind) {
	s.mu.RLock()
	e := s.lookupEvent(p[0])
	var logs []EventLog
	if e != nil {
		logs = e.logs
	}
	s.mu.RUnlock()
	if e == nil {
		errNotFound(w)
		return
	}
	q := r.URL.Query()
	off := 0
	if c := q.Get("cursor"); c != "" {
		o, ok := decodeCursor(c)
		if !ok {
			errDetail(w, http.StatusNotFound, "Invalid cursor")
			return
		}
		off = min(o, len(logs))
	}
	// No default page size: without page_size the whole history returns.
	size := math.MaxInt
	if v, err := strconv.Atoi(q.Get("page_size")); err == nil && v > 0 {
		size = v
	}
	end := len(logs)
	if size < end-off {
		end = off + size
	}
	body := cursorBody{Results: []any{}}
	for _, l := range logs[off:end] {
		body.Results = append(body.Results, eventLogJSON{ID: l.ID, CreatedAt: isoTime(l.CreatedAt), Value: l.Value, Device: l.DeviceID, Variable: l.VariableID, Message: l.Message})
	}
	withCursor := func(o int) string {
		return pageURL(s.baseURL(r), r, func(q url.Values) {
			q.Del("page")
			q.Set("cursor", encodeCursor(o))
		})
	}
	if end < len(logs) {
		body.Next = withCursor(end)
	}
	if off > 0 {
		body.Previous = withCursor(max(off-size, 0))
	}
	writeJSON(w, http.StatusOK, body)
}
