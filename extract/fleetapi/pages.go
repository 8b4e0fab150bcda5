package fleetapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// listPages calls fn for every result of a paginated list starting at first,
// following each page's `next` link verbatim until it is null. It serves
// both the page-number lists and the cursor-paginated event logs, since
// neither needs the client to build a page or cursor itself. Each page is
// decoded whole before fn sees its items, so a failed page is retried
// without fn seeing anything twice.
func listPages[T any](ctx context.Context, c *Client, endpoint string, first *url.URL, fn func(T) error) error {
	seen := make(map[string]bool)
	u := first
	for n := 1; u != nil; n++ {
		key := u.String()
		if seen[key] {
			return fmt.Errorf("list %s: page %d links back to a page already read (%s)", first.EscapedPath(), n, u.EscapedPath())
		}
		seen[key] = true
		var page pageEnvelope[T]
		err := c.do(ctx, &call{method: http.MethodGet, endpoint: endpoint, u: u, accept: "application/json",
			handle: func(_ *http.Response, body io.Reader) error { return decodeJSON(body, &page) }})
		if err != nil {
			return fmt.Errorf("list %s page %d: %w", first.EscapedPath(), n, err)
		}
		for _, item := range page.Results {
			if err := fn(item); err != nil {
				return err
			}
		}
		cur := u
		u = nil
		if page.Next != nil && *page.Next != "" {
			if u, err = c.resolveNext(cur, *page.Next); err != nil {
				return fmt.Errorf("list %s page %d: %w", first.EscapedPath(), n, err)
			}
		}
	}
	return nil
}
