package fleetapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math/bits"
	"net/http"
	"net/url"

	"go.uber.org/zap"
)

// pageEnvelope is a Platform API list page. Count is kept raw because the
// service sometimes sends it as a boolean, and the cursor envelope has none.
type pageEnvelope[T any] struct {
	Count    json.RawMessage `json:"count"`
	Next     *string         `json:"next"`
	Previous *string         `json:"previous"`
	Results  []T             `json:"results"`
}

// UnmarshalJSON reads the envelope, or a bare JSON array as one complete
// page: the spec calls some lists ("the device's variables") just a list,
// without saying they are paginated, so an implementation may send the
// array alone. A `next` or `previous` that is not a string counts as null.
func (p *pageEnvelope[T]) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		*p = pageEnvelope[T]{}
		return json.Unmarshal(b, &p.Results)
	}
	var raw struct {
		Count    json.RawMessage `json:"count"`
		Next     json.RawMessage `json:"next"`
		Previous json.RawMessage `json:"previous"`
		Results  []T             `json:"results"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*p = pageEnvelope[T]{Count: raw.Count, Results: raw.Results, Next: link(raw.Next), Previous: link(raw.Previous)}
	return nil
}

// link reads a pagination link: a non-empty string, or nil for null, an
// empty string and anything else.
func link(raw json.RawMessage) *string {
	var s string
	if json.Unmarshal(raw, &s) != nil || s == "" {
		return nil
	}
	return &s
}

// listItem is a list result with an identity: listPages restarts a walk
// whose later page vanished only for such items, and never hands the same
// key to fn twice. An empty key is never deduplicated.
type listItem interface {
	listKey() string
}

// maxListRestarts bounds how often one list walk starts over from its first
// page after a later page vanished.
const maxListRestarts = 3

// listPages calls fn for every result of a paginated list starting at first,
// following each page's `next` link verbatim until it is null. It serves
// both the page-number lists and the cursor-paginated event logs, since
// neither needs the client to build a page or cursor itself. Each page is
// decoded whole before fn sees its items, so a failed page is retried
// without fn seeing anything twice.
//
// For results with an identity (listItem), a 404 on a page after the first
// (the service's {"detail": "Invalid page."}) means the list shrank while
// it was paged, not that its parent is gone: the walk starts over from the
// first page, at most maxListRestarts times (then a *ListChangedError), and
// fn never sees the same id twice (see keySet). A 404 on the first page, and
// a 404 with code 404001 (an unknown object) on any page, are returned as
// they are: the parent is gone.
func listPages[T any](ctx context.Context, c *Client, endpoint string, first *url.URL, fn func(T) error) error {
	_, keyed := any(*new(T)).(listItem)
	var yielded *keySet
	if keyed {
		yielded = newKeySet()
	}
	for restarts := 0; ; restarts++ {
		gone, err := listPass(ctx, c, endpoint, first, yielded, fn)
		if gone == nil {
			return err
		}
		if restarts == maxListRestarts {
			return &ListChangedError{List: first.EscapedPath(), Restarts: restarts, Last: gone}
		}
		c.log.Info("a page of a list vanished while it was paged; reading the list again from its first page",
			zap.String("path", first.EscapedPath()), zap.Int("restart", restarts+1), zap.Error(gone))
	}
}

// listPass walks the list once from first. gone is the 404 of a page after
// the first when the results are keyed (yielded is not nil) and the caller
// should start over; err is any other failure.
func listPass[T any](ctx context.Context, c *Client, endpoint string, first *url.URL, yielded *keySet, fn func(T) error) (gone *APIError, err error) {
	seen := make(map[string]bool)
	u := first
	for n := 1; u != nil; n++ {
		key := u.String()
		if seen[key] {
			return nil, fmt.Errorf("list %s: page %d links back to a page already read (%s)", first.EscapedPath(), n, u.EscapedPath())
		}
		seen[key] = true
		var page pageEnvelope[T]
		err := c.do(ctx, &call{method: http.MethodGet, endpoint: endpoint, u: u, accept: "application/json",
			handle: func(_ *http.Response, body io.Reader) error { return decodePage(body, &page) }})
		if err != nil {
			if n == 1 {
				if smaller := c.smallerPages(u, err); smaller != nil {
					u, n = smaller, 0
					continue
				}
			}
			var ae *APIError
			if yielded != nil && n > 1 && errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code != CodeNotFound {
				return ae, nil
			}
			return nil, fmt.Errorf("list %s page %d: %w", first.EscapedPath(), n, err)
		}
		for _, item := range page.Results {
			if yielded != nil {
				if k := any(item).(listItem).listKey(); k != "" && !yielded.add(k) {
					continue
				}
			}
			if err := fn(item); err != nil {
				return nil, err
			}
		}
		cur := u
		u = nil
		if page.Next != nil && *page.Next != "" {
			if u, err = c.resolveNext(cur, *page.Next); err != nil {
				return nil, fmt.Errorf("list %s page %d: %w", first.EscapedPath(), n, err)
			}
		}
	}
	return nil, nil
}

// keySet is the set of keys a keyed list walk has yielded, across its pages
// and restarts. A walk of the account's variables holds one key per
// variable of the fleet, so the set keeps a 128-bit hash of each key (two
// maphash seeds drawn per walk) rather than the key strings, which would
// also keep every decoded id alive for the whole walk. A key is wrongly
// taken as yielded, and its object dropped, only when both its hashes equal
// those of another key of the same list: a 128-bit collision under seeds
// fresh to the walk, about 10^-27 at 10^6 keys, far below the odds of any
// fault of the service or the wire.
//
// The hashes sit in one open-addressing table (linear probing, the first
// hash picking the home slot), kept between 68% and 85% full by growing a
// quarter at a time: 19 to 24 bytes a key, where a Go map of the same
// hashes takes 35 to 56 (it doubles its tables, so they sit half empty
// right after each growth) and the map of strings it replaces 59 to 80.
type keySet struct {
	s1, s2 maphash.Seed
	slots  [][2]uint64 // {0, 0} marks an empty slot
	n      int
}

func newKeySet() *keySet {
	return &keySet{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
}

// add records k and reports whether it was new.
func (s *keySet) add(k string) bool {
	h := [2]uint64{maphash.String(s.s1, k), maphash.String(s.s2, k)}
	if h == ([2]uint64{}) {
		h[1] = 1 // the empty mark; one more 2^-128 chance of a collision
	}
	if (s.n+1)*100 > len(s.slots)*85 {
		s.grow()
	}
	if !keySlot(s.slots, h) {
		return false
	}
	s.n++
	return true
}

// grow moves the hashes to a table a quarter larger (68% full).
func (s *keySet) grow() {
	slots := make([][2]uint64, max(64, (s.n+1)*100/68))
	for _, h := range s.slots {
		if h != ([2]uint64{}) {
			keySlot(slots, h)
		}
	}
	s.slots = slots
}

// keySlot puts h in slots unless it is there already, and reports whether
// it was put. slots has an empty slot.
func keySlot(slots [][2]uint64, h [2]uint64) bool {
	i, _ := bits.Mul64(h[0], uint64(len(slots)))
	for {
		switch slots[i] {
		case h:
			return false
		case [2]uint64{}:
			slots[i] = h
			return true
		}
		if i++; i == uint64(len(slots)) {
			i = 0
		}
	}
}

// decodePage reads one list page. GET values pages go through
// decodeValuesPage, which takes the NaN and Infinity tokens a data point may
// hold; every other list is plain JSON, read as pageEnvelope's
// UnmarshalJSON reads it, but in one pass of the decoder: through that
// method the page would be scanned four times (the decoder's read, its
// skip over the value, json.Unmarshal's check, the decoding), and a walk
// of a large account is mostly this.
func decodePage[T any](body io.Reader, page *pageEnvelope[T]) error {
	if vp, ok := any(page).(*pageEnvelope[valueJSON]); ok {
		return decodeValuesPage(body, vp)
	}
	br := bufio.NewReader(body)
	for {
		c, err := br.ReadByte()
		if err != nil {
			// Empty or unreadable: as the decoder reports it.
			return decodeJSON(br, page)
		}
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		_ = br.UnreadByte()
		if c == '[' {
			*page = pageEnvelope[T]{}
			return decodeJSON(br, &page.Results)
		}
		break
	}
	var raw struct {
		Count    json.RawMessage `json:"count"`
		Next     json.RawMessage `json:"next"`
		Previous json.RawMessage `json:"previous"`
		Results  []T             `json:"results"`
	}
	if err := decodeJSON(br, &raw); err != nil {
		return err
	}
	*page = pageEnvelope[T]{Count: raw.Count, Results: raw.Results, Next: link(raw.Next), Previous: link(raw.Previous)}
	return nil
}
