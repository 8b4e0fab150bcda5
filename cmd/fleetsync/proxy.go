package main

import (
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpproxy"
)

// sourceProxy picks the proxy of each request to the service from the
// standard variables in environ (HTTPS_PROXY and NO_PROXY, or their
// lower-case forms), as http.ProxyFromEnvironment does from the process
// environment; reading the list given to run keeps tests from touching the
// process environment. As with curl and Go's own transport, loopback hosts
// (127.0.0.1, localhost) are never proxied.
//
// Only https base URLs are proxied, through a CONNECT tunnel: the proxy
// sees the host name and port, and the token travels inside TLS. A
// plain-HTTP proxy (HTTP_PROXY) would receive every request, token
// included, in clear, and the token goes to no host but base_url's; so
// HTTP_PROXY is not used, and ignored names it when it is set.
func sourceProxy(environ []string) (proxy func(*http.Request) (*url.URL, error), ignored string) {
	get := func(names ...string) (string, string) {
		for _, n := range names {
			for _, kv := range environ {
				if k, v, ok := strings.Cut(kv, "="); ok && k == n && v != "" {
					return n, v
				}
			}
		}
		return "", ""
	}
	_, httpsProxy := get("HTTPS_PROXY", "https_proxy")
	_, noProxy := get("NO_PROXY", "no_proxy")
	ignored, _ = get("HTTP_PROXY", "http_proxy")
	pf := (&httpproxy.Config{HTTPSProxy: httpsProxy, NoProxy: noProxy}).ProxyFunc()
	return func(r *http.Request) (*url.URL, error) { return pf(r.URL) }, ignored
}
