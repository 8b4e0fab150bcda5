package chserver

import (
	"context"
	"crypto/tls"
	"testing"
)

// startTLS starts a server that speaks TLS only, with certificates made in
// a temporary directory; clientCA makes it demand client certificates.
func startTLS(t *testing.T, clientCA bool) (*Server, *Certs) {
	t.Helper()
	ctx := context.Background()
	certs, err := MakeCerts(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts := &TLSOptions{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKey, CAFile: certs.CAFile}
	if clientCA {
		opts.ClientCAFile, opts.ClientCertFile, opts.ClientKeyFile = certs.CAFile, certs.ClientCertFile, certs.ClientKey
	}
	srv, err := Start(ctx, Options{TLS: opts})
	if err != nil {
		t.Fatalf("Start with TLS: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv, certs
}

func TestTLSServerAnswersOnlyOverTLS(t *testing.T) {
	srv, certs := startTLS(t, false)
	ctx := context.Background()
	if Reachable(ctx, srv.Addr()) {
		t.Errorf("the secure port %s answered plain TCP", srv.Addr())
	}
	tc, err := (&TLSOptions{CAFile: certs.CAFile}).probeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !reachable(ctx, srv.Addr(), tc) {
		t.Errorf("the secure port %s did not answer TLS trusting the test CA", srv.Addr())
	}
	other, err := (&TLSOptions{CAFile: certs.OtherCAFile}).probeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if reachable(ctx, srv.Addr(), other) {
		t.Errorf("a client trusting another CA accepted the server's certificate")
	}
}

func TestTLSServerWithClientCAWantsAClientCertificate(t *testing.T) {
	srv, certs := startTLS(t, true)
	ctx := context.Background()
	withCert, err := (&TLSOptions{CAFile: certs.CAFile, ClientCAFile: certs.CAFile, ClientCertFile: certs.ClientCertFile, ClientKeyFile: certs.ClientKey}).probeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !reachable(ctx, srv.Addr(), withCert) {
		t.Fatalf("the server refused the client certificate its CA signed")
	}
	noCert := withCert.Clone()
	noCert.Certificates = []tls.Certificate(nil)
	if reachable(ctx, srv.Addr(), noCert) {
		t.Errorf("the server answered a client without a certificate (verificationMode strict)")
	}
}
