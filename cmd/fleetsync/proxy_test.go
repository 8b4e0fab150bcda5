package main

import (
	"net/http"
	"net/url"
	"testing"
)

func TestSourceProxyTunnelsHTTPSOnlyAndHonoursNoProxy(t *testing.T) {
	env := []string{"https_proxy=http://proxy.internal:3128", "HTTP_PROXY=http://plain.internal:8080", "NO_PROXY=direct.example.com,.corp"}
	proxy, ignored := sourceProxy(env)
	if ignored != "HTTP_PROXY" {
		t.Errorf("ignored = %q, want HTTP_PROXY named", ignored)
	}
	tests := []struct{ url, want string }{
		{"https://telemetry.example.com/api/v2.0/devices/", "http://proxy.internal:3128"},
		{"http://telemetry.example.com/api/v2.0/devices/", ""}, // never through a plain-HTTP proxy
		{"https://direct.example.com/api/v2.0/devices/", ""},
		{"https://svc.corp/api/v2.0/devices/", ""},
		{"https://127.0.0.1:8443/api/v2.0/devices/", ""},
		{"https://localhost:8443/api/v2.0/devices/", ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", tt.url, nil)
		u, err := proxy(req)
		got := ""
		if u != nil {
			got = u.String()
		}
		if err != nil || got != tt.want {
			t.Errorf("proxy for %s = %q, %v; want %q", tt.url, got, err, tt.want)
		}
	}
	if p, ignored := sourceProxy(nil); ignored != "" {
		t.Errorf("no environment: ignored %q", ignored)
	} else if u, _ := p(&http.Request{URL: mustURL(t, "https://telemetry.example.com/")}); u != nil {
		t.Errorf("no environment: proxied through %s", u)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
