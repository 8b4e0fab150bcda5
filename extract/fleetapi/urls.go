package fleetapi

// Where a request may go: every URL the client builds or follows stays on
// the configured base URL's origin, and the token goes nowhere else.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"
)

// checkRedirect keeps the token only on redirects to the base URL's origin.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if !c.sameOrigin(req.URL) {
		req.Header.Del(headerToken)
	}
	return nil
}

// sameOrigin tells whether u may receive the token: same host and port as
// the base URL, and no downgrade from https to http.
func (c *Client) sameOrigin(u *url.URL) bool {
	if !strings.EqualFold(u.Hostname(), c.base.Hostname()) {
		return false
	}
	if c.base.Scheme == "https" && u.Scheme != "https" {
		return false
	}
	return effectivePort(u) == effectivePort(c.base)
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// apiURL builds base + prefix + escapedPath + ?query; escapedPath must have
// its variable segments escaped with url.PathEscape.
func (c *Client) apiURL(prefix, escapedPath string, q url.Values) *url.URL {
	u := *c.base
	u.RawPath = strings.TrimRight(c.base.EscapedPath(), "/") + prefix + escapedPath
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	} else {
		u.Path, u.RawPath = u.RawPath, ""
	}
	u.RawQuery = ""
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return &u
}

// resolveNext turns a `next` link into the URL to request: followed
// verbatim, and when relative resolved against the page it appeared on
// (cur; the base URL when nil), as RFC 3986 resolves any link, so that
// "?page=2" stays on the list it came from. A `token` query
// parameter is dropped, since a token never travels in a URL.
//
// A link that names another origin than the base URL (another host or
// port, or http where the base is https) is what a service behind a proxy
// writes when it builds links from its own address: its path and query are
// followed on the base URL's scheme, host and port instead (see rebase), so
// the walk goes on through the proxy, with the token, and never to the
// other host.
func (c *Client) resolveNext(cur *url.URL, next string) (*url.URL, error) {
	u, err := url.Parse(next)
	if err != nil {
		return nil, fmt.Errorf("the next link is not a URL: %w", err)
	}
	if !u.IsAbs() {
		if cur == nil {
			cur = c.base
		}
		u = cur.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("the next link has scheme %q", u.Scheme)
	}
	if !c.sameOrigin(u) {
		c.log.Debug("the next link names another host; following its path on the base URL",
			zap.String("link_host", u.Host), zap.String("path", u.EscapedPath()))
		u = c.rebase(u)
	}
	if q := u.Query(); q.Has("token") {
		q.Del("token")
		u.RawQuery = q.Encode()
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// rebase moves u onto the base URL's scheme, host and port, keeping its
// path and query. When the base URL has a path of its own (a proxy serving
// the API below a prefix) and u's path does not start with it, the part of
// u's path from the API version prefix on (/api/v2.0, /api/v1.6) is put
// below the base path, since the service does not know the proxy's prefix.
func (c *Client) rebase(u *url.URL) *url.URL {
	p := u.EscapedPath()
	if bp := strings.TrimRight(c.base.EscapedPath(), "/"); bp != "" && p != bp && !strings.HasPrefix(p, bp+"/") {
		for _, prefix := range []string{platformPrefix, dataPrefix} {
			if i := strings.Index(p, prefix+"/"); i >= 0 {
				p = bp + p[i:]
				break
			}
		}
	}
	out := *c.base
	out.User = nil
	out.RawPath = p
	if up, err := url.PathUnescape(p); err == nil {
		out.Path = up
	} else {
		out.Path, out.RawPath = p, ""
	}
	out.RawQuery = u.RawQuery
	out.Fragment, out.RawFragment = "", ""
	return &out
}
