package fleetsim

import (
	"net/http"
	"net/url"
	"strconv"
	"time"
)

const (
	defaultPageSize    = 50
	defaultVarPageSize = 200
	// maxPageSize bounds page_size on Platform API lists (not shown in the
	// spec): larger values are clamped, as a DRF max_page_size does.
	maxPageSize = 1000
	maxBodySize = 8 << 20
)

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// page is one page of a Platform API list.
type page struct {
	lo, hi     int
	next, prev any // URL string or nil
}

// paginate applies page and page_size to a list of total items. It writes
// the 404 "Invalid page." itself and reports false then.
// Links are built on base (see Sim.baseURL).
func paginate(w http.ResponseWriter, r *http.Request, base string, total, defSize int) (page, bool) {
	q := r.URL.Query()
	size := defSize
	if v, err := strconv.Atoi(q.Get("page_size")); err == nil && v > 0 {
		size = min(v, maxPageSize)
	}
	num := 1
	if ps := q.Get("page"); ps != "" {
		v, err := strconv.Atoi(ps)
		if err != nil || v < 1 {
			errInvalidPage(w)
			return page{}, false
		}
		num = v
	}
	pages := max(1, (total+size-1)/size)
	if num > pages {
		errInvalidPage(w)
		return page{}, false
	}
	p := page{lo: (num - 1) * size, hi: min(num*size, total)}
	if num < pages {
		p.next = pageURL(base, r, func(q url.Values) { q.Set("page", strconv.Itoa(num+1)) })
	}
	if num > 1 {
		p.prev = pageURL(base, r, func(q url.Values) {
			if num == 2 {
				q.Del("page")
			} else {
				q.Set("page", strconv.Itoa(num-1))
			}
		})
	}
	return p, true
}

type listBody struct {
	Count    int   `json:"count"`
	Next     any   `json:"next"`
	Previous any   `json:"previous"`
	Results  []any `json:"results"`
}

func writeList[T any](w http.ResponseWriter, r *http.Request, base string, items []T, defSize int, render func(T) any) {
	p, ok := paginate(w, r, base, len(items), defSize)
	if !ok {
		return
	}
	res := make([]any, 0, p.hi-p.lo)
	for _, it := range items[p.lo:p.hi] {
		res = append(res, render(it))
	}
	writeJSON(w, http.StatusOK, listBody{Count: len(items), Next: p.next, Previous: p.prev, Results: res})
}
