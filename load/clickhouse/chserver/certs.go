package chserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Certs are PEM files made by MakeCerts: a CA, a server certificate and a
// client certificate it signed, and a second CA that signed neither (for
// tests of an untrusted server).
type Certs struct {
	CAFile, CAKeyFile         string
	ServerCertFile, ServerKey string
	ClientCertFile, ClientKey string
	OtherCAFile               string
}

// MakeCerts writes a fresh CA, a server certificate for 127.0.0.1, ::1,
// localhost and hosts, and a client certificate into dir, with the openssl
// command-line tool (Debian's openssl package), so that tests exercise the
// same PEM files a user would make. Keys are unencrypted RSA 2048, valid
// for two days.
func MakeCerts(ctx context.Context, dir string, hosts ...string) (*Certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certificate dir: %w", err)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	c := &Certs{
		CAFile: p("ca.pem"), CAKeyFile: p("ca-key.pem"),
		ServerCertFile: p("server.pem"), ServerKey: p("server-key.pem"),
		ClientCertFile: p("client.pem"), ClientKey: p("client-key.pem"),
		OtherCAFile: p("other-ca.pem"),
	}
	san := "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"
	for _, h := range hosts {
		san += ",DNS:" + h
	}
	steps := [][]string{
		{"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=fleetsync test CA",
			"-keyout", c.CAKeyFile, "-out", c.CAFile},
		{"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=fleetsync other CA",
			"-keyout", p("other-ca-key.pem"), "-out", c.OtherCAFile},
		{"req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", c.ServerKey, "-out", p("server.csr")},
		{"x509", "-req", "-in", p("server.csr"), "-CA", c.CAFile, "-CAkey", c.CAKeyFile, "-CAcreateserial", "-days", "2",
			"-extfile", p("server.ext"), "-out", c.ServerCertFile},
		{"req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=fleetsync client", "-keyout", c.ClientKey, "-out", p("client.csr")},
		{"x509", "-req", "-in", p("client.csr"), "-CA", c.CAFile, "-CAkey", c.CAKeyFile, "-CAcreateserial", "-days", "2",
			"-extfile", p("client.ext"), "-out", c.ClientCertFile},
	}
	if err := os.WriteFile(p("server.ext"), []byte(san+"\nextendedKeyUsage=serverAuth\n"), 0o600); err != nil {
		return nil, fmt.Errorf("certificate extensions: %w", err)
	}
	if err := os.WriteFile(p("client.ext"), []byte("extendedKeyUsage=clientAuth\n"), 0o600); err != nil {
		return nil, fmt.Errorf("certificate extensions: %w", err)
	}
	for _, args := range steps {
		out, err := exec.CommandContext(ctx, "openssl", args...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("openssl %s: %w: %s (install Debian's openssl package)", strings.Join(args[:2], " "), err, strings.TrimSpace(string(out)))
		}
	}
	return c, nil
}
