package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
)

// chPassword is the password of the ClickHouse user fleetsync logs in as in
// the TLS tests; it must never appear in fleetsync's output.
const chPassword = "ch-pass-s3cr3t-7f3a"

// tlsWorld is a world whose ClickHouse speaks TLS only (no plain native
// port), with certificates made by openssl for this test, and a user
// "fleetsync" with a password, which fleetsync logs in as.
type tlsWorld struct {
	*world
	certs *chserver.Certs
}

// newTLSWorld starts the TLS ClickHouse (demanding client certificates
// when clientCA) and a world on it, whose fleetsim speaks plain HTTP. It
// logs at debug, so that as much as possible is printed for the secret
// checks; set the clickhouse section's tls lines with configure.
func newTLSWorld(t *testing.T, clientCA bool) *tlsWorld {
	t.Helper()
	ctx := context.Background()
	certs, err := chserver.MakeCerts(ctx, filepath.Join(t.TempDir(), "certs"), "fleetsim.test")
	if err != nil {
		t.Fatal(err)
	}
	opts := &chserver.TLSOptions{CertFile: certs.ServerCertFile, KeyFile: certs.ServerKey, CAFile: certs.CAFile}
	if clientCA {
		opts.ClientCAFile, opts.ClientCertFile, opts.ClientKeyFile = certs.CAFile, certs.ClientCertFile, certs.ClientKey
	}
	srv := chtest.Start(t, chserver.Options{TLS: opts, Users: map[string]string{"fleetsync": chPassword}})
	if chserver.Reachable(ctx, srv.Addr()) {
		t.Fatalf("the TLS ClickHouse answers plain TCP on %s; the test needs the plain port closed", srv.Addr())
	}
	w := newWorld(t, worldOpts{
		server:     srv,
		sim:        fleetsim.Options{Seed: 11, Devices: 3, Variables: 4, Points: 300, Span: 30 * 24 * time.Hour},
		clickhouse: "username: fleetsync\npassword: " + chPassword + "\ndial_timeout: 5s",
		log:        "level: debug",
	})
	w.secrets = append(w.secrets, chPassword)
	return &tlsWorld{world: w, certs: certs}
}

func TestSyncIntoTLSOnlyClickHouseWithACAFileIsExact(t *testing.T) {
	w := newTLSWorld(t, false)
	w.configure(configLines{clickhouse: fmt.Sprintf("tls:\n  enabled: true\n  ca_file: %s", w.certs.CAFile)})
	w.sync()
	n := w.checkOracle()
	if n < 1000 {
		t.Fatalf("only %d points; the test needs a real fleet", n)
	}
	t.Logf("%d points synced over TLS", n)
}

func TestSyncIntoClickHouseThatDemandsAClientCertificateIsExact(t *testing.T) {
	w := newTLSWorld(t, true)
	w.configure(configLines{clickhouse: fmt.Sprintf("tls:\n  enabled: true\n  ca_file: %s\n  cert_file: %s\n  key_file: %s",
		w.certs.CAFile, w.certs.ClientCertFile, w.certs.ClientKey)})
	w.sync()
	n := w.checkOracle()
	t.Logf("%d points synced over TLS with a client certificate", n)

	// Without the certificate the server refuses, and the message says
	// where the fix is.
	w.configure(configLines{clickhouse: fmt.Sprintf("tls:\n  enabled: true\n  ca_file: %s", w.certs.CAFile)})
	code, errs := w.failingSync()
	if code != 2 || !strings.Contains(errs, "clickhouse.tls") || !strings.Contains(errs, "cert_file") {
		t.Fatalf("without a client certificate: exit %d, last line %q; want a failure naming clickhouse.tls and cert_file", code, errs)
	}
}

// failingSync runs a sync that must fail and returns its status and its
// last line, after checking that the error is one line without secrets.
func (w *tlsWorld) failingSync() (int, string) {
	w.t.Helper()
	code, errs := w.syncWithEnv(nil)
	last := lastLines(errs, 1)
	w.t.Logf("exit %d: %s", code, last)
	if !strings.HasPrefix(last, "fleetsync sync: ") {
		w.t.Fatalf("the last line is not fleetsync's one-line error: %q\nfull output:\n%s", last, lastLines(errs, 10))
	}
	return code, last
}

func TestWrongCAForClickHouseFailsWithOneLineNamingClickHouseTLS(t *testing.T) {
	w := newTLSWorld(t, false)
	cases := []struct {
		name, tls, wantIn string
		code              int
	}{
		{"a CA that did not sign the server", "tls:\n  enabled: true\n  ca_file: " + w.certs.OtherCAFile, "clickhouse.tls.ca_file to the CA that signed", 2},
		{"no CA file: the test CA is not a system CA", "tls:\n  enabled: true", "clickhouse.tls.ca_file to the CA that signed", 2},
		{"a name the certificate does not carry", "tls:\n  enabled: true\n  ca_file: " + w.certs.CAFile + "\n  server_name: ch.example.com", "clickhouse.tls.server_name", 2},
		{"plain TCP to the TLS port", "", "set clickhouse.tls.enabled: true", 1},
		{"an unreadable CA file", "tls:\n  enabled: true\n  ca_file: " + filepath.Join(w.dir, "missing.pem"), "clickhouse.tls.ca_file: open", 2},
		{"a CA file without PEM", "tls:\n  enabled: true\n  ca_file: " + w.tokenFile, "clickhouse.tls.ca_file: " + w.tokenFile + " holds no PEM certificate", 2},
		{"a key file that does not match", "tls:\n  enabled: true\n  ca_file: " + w.certs.CAFile + "\n  cert_file: " + w.certs.ClientCertFile + "\n  key_file: " + w.certs.ServerKey, "clickhouse.tls.cert_file, clickhouse.tls.key_file", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w.t = t
			w.configure(configLines{clickhouse: c.tls})
			code, last := w.failingSync()
			if code != c.code || !strings.Contains(last, c.wantIn) {
				t.Fatalf("exit %d (want %d), last line %q (want it to contain %q)", code, c.code, last, c.wantIn)
			}
		})
	}
}

func TestSyncOverTLSWithLZ4AndWithoutBothExact(t *testing.T) {
	w := newTLSWorld(t, false)
	for _, method := range []string{"lz4", "none", "zstd"} {
		t.Run(method, func(t *testing.T) {
			w.t = t
			if err := w.conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+w.db+"`"); err != nil {
				t.Fatal(err)
			}
			w.configure(configLines{clickhouse: fmt.Sprintf("compression: %s\ntls:\n  enabled: true\n  ca_file: %s", method, w.certs.CAFile)})
			w.sync()
			n := w.checkOracle()
			t.Logf("compression %s: %d points exact", method, n)
		})
	}
}

func TestInsecureSkipVerifySyncsAndLogsAWarning(t *testing.T) {
	w := newTLSWorld(t, false)
	w.configure(configLines{clickhouse: "tls:\n  enabled: true\n  insecure_skip_verify: true"})
	_, logs := w.sync()
	w.checkOracle()
	warned := false
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "clickhouse.tls.insecure_skip_verify is true") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no warning about clickhouse.tls.insecure_skip_verify in the log:\n%s", lastLines(logs, 10))
	}
}
