package main

import (
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpproxy"
)

// sourceProxy picks the proxy of each request to the service from the
// standard variables in environ (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, or
// their lower-case forms), as http.ProxyFromEnvironment does from the
// process environment. Reading the list given to run keeps tests from
// touching the process environment. As with curl and Go's own transport,
// loopback hosts (127.0.0.1, localhost) are never proxied. The token is
// sent only inside the TLS tunnel of an https base_url: a proxy sees the
// CONNECT line, never the request headers.
func sourceProxy(environ []string) func(*http.Request) (*url.URL, error) {
	get := func(names ...string) string {
		for _, n := range names {
			for _, kv := range environ {
				if k, v, ok := strings.Cut(kv, "="); ok && k == n && v != "" {
					return v
				}
			}
		}
		return ""
	}
	pf := (&httpproxy.Config{
		HTTPProxy:  get("HTTP_PROXY", "http_proxy"),
		HTTPSProxy: get("HTTPS_PROXY", "https_proxy"),
		NoProxy:    get("NO_PROXY", "no_proxy"),
	}).ProxyFunc()
	return func(r *http.Request) (*url.URL, error) { return pf(r.URL) }
}
