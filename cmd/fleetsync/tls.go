package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/config"
)

// clickhouseTLS builds the TLS settings of the native protocol from
// clickhouse.tls: nil when it is off. A file that cannot be read or holds
// no usable PEM is a usage error naming its key (exit status 2), found
// before any connection is tried.
func clickhouseTLS(c config.ClickHouseConfig, log *zap.Logger) (*tls.Config, error) {
	t := c.TLS
	if !t.Enabled {
		return nil, nil
	}
	// An empty ServerName is filled by crypto/tls from each address dialled.
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pool, err := caPool("clickhouse.tls.ca_file", t.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// LoadX509KeyPair's errors name the file and the PEM problem,
			// never the key's bytes.
			return nil, usagef("clickhouse.tls.cert_file, clickhouse.tls.key_file: %v; give a PEM certificate and its unencrypted PEM key, readable by fleetsync", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if t.InsecureSkipVerify {
		tc.InsecureSkipVerify = true
		log.Warn("clickhouse.tls.insecure_skip_verify is true: the server's certificate is not checked, so anyone on the path can read and change the data and the password; set clickhouse.tls.ca_file instead")
	}
	return tc, nil
}

// caPool is the system's CA pool plus the PEM certificates of file; key
// names the setting in errors.
func caPool(key, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("%s: %v; check the path and the file's permissions", key, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usagef("%s: %s holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the CA certificate in PEM form", key, file)
	}
	return pool, nil
}

// sourceTLS is the TLS client configuration for source.base_url: nil (the
// system's CAs) unless source.ca_file adds some.
func sourceTLS(s config.SourceConfig) (*tls.Config, error) {
	if s.CAFile == "" {
		return nil, nil
	}
	pool, err := caPool("source.ca_file", s.CAFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// tlsHint completes the "unreachable" message when TLS is off: a plain
// client on a TLS-only port (9440 on ClickHouse Cloud) sees the server
// close the connection, which no error type tells apart from a crash.
func tlsHint(c config.ClickHouseConfig) string {
	if c.TLS.Enabled {
		return ""
	}
	return " (if the port speaks TLS only, e.g. 9440, set clickhouse.tls.enabled: true)"
}
