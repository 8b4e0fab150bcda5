package chserver

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSOptions make Start serve the native protocol over TLS only, on
// tcp_port_secure, with the openSSL section of ClickHouse 18.16's config.
type TLSOptions struct {
	// CertFile and KeyFile are the server's PEM certificate and key.
	CertFile, KeyFile string
	// CAFile is the CA that signed CertFile; the package's own readiness
	// checks trust it.
	CAFile string
	// ClientCAFile, when set, makes the server demand a client certificate
	// signed by it (verificationMode strict); ClientCertFile and
	// ClientKeyFile are then what the readiness checks present.
	ClientCAFile                  string
	ClientCertFile, ClientKeyFile string
}

// probeConfig is the TLS client setup of the readiness checks: trusting
// CAFile and presenting the client certificate when the server wants one.
func (o *TLSOptions) probeConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(o.CAFile)
	if err != nil {
		return nil, fmt.Errorf("chserver TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("chserver TLS CA %s: no PEM certificate in it", o.CAFile)
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if o.ClientCAFile != "" {
		cert, err := tls.LoadX509KeyPair(o.ClientCertFile, o.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("chserver TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// TLSClient is a TLS client configuration that trusts the server's CA and
// presents the client certificate when it wants one; nil for a plain server.
func (s *Server) TLSClient() *tls.Config {
	if s.probe == nil {
		return nil
	}
	return s.probe.Clone()
}
