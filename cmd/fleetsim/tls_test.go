package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

func TestTLSFlagsServeHTTPSWithTheGivenCertificate(t *testing.T) {
	certs, err := chserver.MakeCerts(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := startRun(t, "--devices", "1", "--points", "5", "--token", "t1", "--tls-cert", certs.ServerCertFile, "--tls-key", certs.ServerKey)
	if !strings.HasPrefix(base, "https://127.0.0.1:") {
		t.Fatalf("ready line names %q, want https://127.0.0.1:PORT", base)
	}
	pem, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest("GET", base+"/api/v2.0/devices/", nil)
	req.Header.Set("X-Auth-Token", "t1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET over HTTPS trusting the test CA: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Errorf("GET devices over HTTPS: status %d, TLS %v; want 200 over TLS", resp.StatusCode, resp.TLS != nil)
	}
}

func TestTLSFlagsGoTogether(t *testing.T) {
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--tls-cert", "x.pem"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key go together") {
		t.Fatalf("--tls-cert alone: %v, want an error saying both are needed", err)
	}
}
