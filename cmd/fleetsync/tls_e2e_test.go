package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
)

// chPassword is the password of the ClickHouse user fleetsync logs in as in
// the TLS tests; it must never appear in fleetsync's output.
const chPassword = "ch-pass-s3cr3t-7f3a"

// tlsWorld is a world whose ClickHouse speaks TLS only (no plain native
// port), with certificates made by openssl for this test, and a user
// "fleetsync" with a password.
type tlsWorld struct {
	*world
	srv   *chserver.Server
	certs *chserver.Certs
}

// newTLSWorld starts the TLS ClickHouse (demanding client certificates
// when clientCA) and a fleetsim over plain HTTP.
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
	srv, err := chserver.Start(ctx, chserver.Options{TLS: opts, Users: map[string]string{"fleetsync": chPassword}})
	if err != nil {
		t.Fatalf("start a TLS ClickHouse: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if chserver.Reachable(ctx, srv.Addr()) {
		t.Fatalf("the TLS ClickHouse answers plain TCP on %s; the test needs the plain port closed", srv.Addr())
	}
	w := &world{t: t, chAddr: srv.Addr(), db: "fleet", dir: t.TempDir(), retention: 730 * 24 * time.Hour, margin: time.Hour}
	sim, err := fleetsim.New(fleetsim.Options{Seed: 11, Devices: 3, Variables: 4, Points: 300, Span: 30 * 24 * time.Hour, Tokens: []string{testToken}})
	if err != nil {
		t.Fatalf("fleetsim: %v", err)
	}
	w.sim = sim
	t.Cleanup(sim.Close)
	w.tokenFile = filepath.Join(w.dir, "token")
	w.writeToken(testToken)
	w.http = httptest.NewServer(sim)
	t.Cleanup(w.http.Close)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{srv.Addr()}, TLS: srv.TLSClient()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	w.conn = conn
	return &tlsWorld{world: w, srv: srv, certs: certs}
}

// configure writes the configuration with the given clickhouse section
// additions (tls, compression), logging at debug so that as much as
// possible is printed for the secret checks.
func (w *tlsWorld) configure(chExtra string) string {
	w.t.Helper()
	path := filepath.Join(w.t.TempDir(), "fleetsync.yaml")
	cfg := fmt.Sprintf(`source:
  base_url: %s
  token_file: %s
  retry_max_elapsed: 20s
  initial_requests_per_second: 0
sync:
  lookback: 1h
  batch_age: 200ms
clickhouse:
  addr: [%q]
  database: %s
  username: fleetsync
  password: %s
  dial_timeout: 5s
  retry_max_elapsed: 10s
%s
metrics:
  listen: "127.0.0.1:0"
log:
  format: json
  level: debug
`, w.http.URL, w.tokenFile, w.chAddr, w.db, chPassword, indent(chExtra))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		w.t.Fatal(err)
	}
	w.cfgPath = path
	return path
}

// syncClean runs one sync, requires exit 0 and that neither the password
// nor the token appears in anything fleetsync printed.
func (w *tlsWorld) syncClean() string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code, out, errs := w.cli(ctx, "sync", "--config", w.cfgPath)
	if code != 0 {
		w.t.Fatalf("fleetsync sync exited %d\nstdout: %s\nstderr: %s", code, out, lastLines(errs, 20))
	}
	for _, secret := range []string{chPassword, testToken} {
		if strings.Contains(out+errs, secret) {
			w.t.Fatalf("a secret (%.6s...) appears in fleetsync's output", secret)
		}
	}
	return errs
}

func TestSyncIntoTLSOnlyClickHouseWithACAFileIsExact(t *testing.T) {
	w := newTLSWorld(t, false)
	w.configure(fmt.Sprintf("tls:\n  enabled: true\n  ca_file: %s", w.certs.CAFile))
	w.syncClean()
	n := w.checkOracle()
	if n < 1000 {
		t.Fatalf("only %d points; the test needs a real fleet", n)
	}
	t.Logf("%d points synced over TLS", n)
}

func TestSyncIntoClickHouseThatDemandsAClientCertificateIsExact(t *testing.T) {
	w := newTLSWorld(t, true)
	w.configure(fmt.Sprintf("tls:\n  enabled: true\n  ca_file: %s\n  cert_file: %s\n  key_file: %s",
		w.certs.CAFile, w.certs.ClientCertFile, w.certs.ClientKey))
	w.syncClean()
	n := w.checkOracle()
	t.Logf("%d points synced over TLS with a client certificate", n)

	// Without the certificate the server refuses, and the message says
	// where the fix is.
	w.configure(fmt.Sprintf("tls:\n  enabled: true\n  ca_file: %s", w.certs.CAFile))
	code, errs := w.failingSync()
	if code != 2 || !strings.Contains(errs, "clickhouse.tls") || !strings.Contains(errs, "cert_file") {
		t.Fatalf("without a client certificate: exit %d, last line %q; want a failure naming clickhouse.tls and cert_file", code, errs)
	}
}

// failingSync runs a sync that must fail and returns its status and its
// last line, after checking that the error is one line without secrets.
func (w *tlsWorld) failingSync() (int, string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, errs := w.cli(ctx, "sync", "--config", w.cfgPath)
	last := lastLines(errs, 1)
	w.t.Logf("exit %d: %s", code, last)
	for _, secret := range []string{chPassword, testToken} {
		if strings.Contains(out+errs, secret) {
			w.t.Fatalf("a secret (%.6s...) appears in fleetsync's output", secret)
		}
	}
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
			w.configure(c.tls)
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
			w.configure(fmt.Sprintf("compression: %s\ntls:\n  enabled: true\n  ca_file: %s", method, w.certs.CAFile))
			w.syncClean()
			n := w.checkOracle()
			t.Logf("compression %s: %d points exact", method, n)
		})
	}
}

func TestInsecureSkipVerifySyncsAndLogsAWarning(t *testing.T) {
	w := newTLSWorld(t, false)
	w.configure("tls:\n  enabled: true\n  insecure_skip_verify: true")
	logs := w.syncClean()
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
