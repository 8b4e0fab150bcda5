package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	usersSnippetPath        = "clickhouse/users.d-fleetsync.xml"
	leastPrivilegeSQLPath   = "clickhouse/least-privilege.sql"
	usersSnippetPlaceholder = "REPLACE-WITH-SHA256-HEX-OF-THE-PASSWORD"
)

// TestClickHouse1816LoaderUserIsConfinedToItsDatabase loads the users.d
// snippet into a throwaway Debian ClickHouse 18.16 and checks, as that user,
// that everything a sync cycle does works in its database (create it and its
// tables, add a column, insert, select, read system.tables) and that every
// other database is out of reach.
func TestClickHouse1816LoaderUserIsConfinedToItsDatabase(t *testing.T) {
	snippet := string(mustRead(t, usersSnippetPath))
	if strings.Count(snippet, usersSnippetPlaceholder) != 1 {
		t.Fatalf("%s must hold the password placeholder %s exactly once (the docs tell operators to replace it)", usersSnippetPath, usersSnippetPlaceholder)
	}
	const password = "loader-test-password"
	sum := sha256.Sum256([]byte(password))
	snippet = strings.Replace(snippet, usersSnippetPlaceholder, hex.EncodeToString(sum[:]), 1)

	srv := startClickHouse(t, snippet)
	admin := func(q string) {
		t.Helper()
		if out, err := srv.query("default", "", q); err != nil {
			t.Fatalf("as default: %s: %v\n%s", q, err, out)
		}
	}
	admin("CREATE DATABASE other")
	admin("CREATE TABLE other.t (x Int32) ENGINE = Memory")

	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS fleet",
		"CREATE TABLE IF NOT EXISTS fleet.datapoints (variable_id String, ts_ms Int64, value Float64) ENGINE = ReplacingMergeTree ORDER BY (variable_id, ts_ms)",
		"CREATE TABLE IF NOT EXISTS fleet.datapoints (variable_id String, ts_ms Int64, value Float64) ENGINE = ReplacingMergeTree ORDER BY (variable_id, ts_ms)",
		"ALTER TABLE fleet.datapoints ADD COLUMN context String DEFAULT '{}'",
		"INSERT INTO fleet.datapoints (variable_id, ts_ms, value) VALUES ('v1', 1, 2.5)",
		"SELECT count() FROM fleet.datapoints FINAL",
		"SELECT name FROM system.tables WHERE database = 'fleet'",
		"SELECT name, type FROM system.columns WHERE database = 'fleet' AND table = 'datapoints'",
	} {
		if out, err := srv.query("fleetsync", password, q); err != nil {
			t.Errorf("as fleetsync, %q was refused, but a sync cycle needs it: %v\n%s", q, err, out)
		}
	}
	for _, q := range []string{
		"SELECT count() FROM other.t",
		"INSERT INTO other.t VALUES (1)",
		"CREATE TABLE other.u (x Int32) ENGINE = Memory",
		"DROP TABLE other.t",
		"CREATE DATABASE elsewhere",
		"SELECT count() FROM default.anything",
	} {
		out, err := srv.query("fleetsync", password, q)
		if err == nil || !strings.Contains(out, "Code: 291") {
			t.Errorf("as fleetsync, %q: want ACCESS_DENIED (Code: 291), got err=%v\n%s", q, err, out)
		}
	}
	if out, err := srv.query("fleetsync", "wrong-password", "SELECT 1"); err == nil {
		t.Errorf("fleetsync logged in with a wrong password:\n%s", out)
	}
}

// TestLeastPrivilegeSQLGrantsOnlyTheLoadersDatabase reads the GRANT SQL for
// current releases (18.16 cannot run it): every grant is on the loader's
// database, and none hands out DROP, TRUNCATE, ALTER DELETE or ALL.
func TestLeastPrivilegeSQLGrantsOnlyTheLoadersDatabase(t *testing.T) {
	var stmts []string
	for _, s := range strings.Split(stripSQLComments(string(mustRead(t, leastPrivilegeSQLPath))), ";") {
		if s = strings.Join(strings.Fields(s), " "); s != "" {
			stmts = append(stmts, s)
		}
	}
	grantRE := regexp.MustCompile(`^GRANT (.+) ON (\S+) TO fleetsync$`)
	var privileges []string
	for _, s := range stmts {
		upper := strings.ToUpper(s)
		if !strings.HasPrefix(upper, "GRANT ") {
			continue
		}
		m := grantRE.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("grant %q: want GRANT <privileges> ON fleet.* TO fleetsync", s)
			continue
		}
		if m[2] != "fleet.*" {
			t.Errorf("grant %q is on %s, want fleet.* only", s, m[2])
		}
		for _, p := range strings.Split(m[1], ",") {
			p = strings.ToUpper(strings.TrimSpace(p))
			privileges = append(privileges, p)
			for _, forbidden := range []string{"ALL", "DROP", "TRUNCATE", "DELETE", "UPDATE", "GRANT OPTION", "SYSTEM", "KILL"} {
				if strings.Contains(p, forbidden) {
					t.Errorf("grant %q hands out %s", s, p)
				}
			}
		}
	}
	for _, want := range []string{"SELECT", "INSERT", "CREATE TABLE", "ALTER ADD COLUMN"} {
		if !strings.Contains(strings.Join(privileges, ","), want) {
			t.Errorf("%s grants %v, which lacks %s", leastPrivilegeSQLPath, privileges, want)
		}
	}
	if !slicesContainsPrefix(stmts, "CREATE USER IF NOT EXISTS fleetsync") {
		t.Errorf("%s creates no fleetsync user", leastPrivilegeSQLPath)
	}
}

func stripSQLComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func slicesContainsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// clickHouse is a throwaway clickhouse-server started by this test process.
type clickHouse struct {
	client string
	port   int
}

// query runs q through clickhouse-client as user and returns its output.
func (c *clickHouse) query(user, password, q string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{"--host", "127.0.0.1", "--port", strconv.Itoa(c.port), "--user", user, "--query", q}
	if password != "" {
		args = append(args, "--password", password)
	}
	out, err := exec.CommandContext(ctx, c.client, args...).CombinedOutput()
	return string(out), err
}

// startClickHouse starts Debian's clickhouse-server (CI installs it; a
// missing one fails the test) in a temporary directory on free loopback
// ports, with usersSnippet in its users.d, waits until it answers, and stops
// it (by its PID) when the test ends. A port can be taken between its pick
// and the server's bind; a start that fails so is tried again on fresh
// ports.
func startClickHouse(t *testing.T, usersSnippet string) *clickHouse {
	t.Helper()
	server := os.Getenv("FLEETSYNC_CLICKHOUSE_SERVER")
	if server == "" {
		server = "/usr/sbin/clickhouse-server"
	}
	if _, err := os.Stat(server); err != nil {
		t.Fatalf("clickhouse-server: %v (apt-get install clickhouse-server, or set FLEETSYNC_CLICKHOUSE_SERVER)", err)
	}
	client, err := exec.LookPath("clickhouse-client")
	if err != nil {
		t.Fatalf("clickhouse-client: %v (apt-get install clickhouse-client)", err)
	}
	var logs string
	for range 3 {
		c, out := tryClickHouse(t, server, client, usersSnippet)
		if c != nil {
			return c
		}
		logs = out
		if !strings.Contains(out, "Address already in use") {
			break
		}
	}
	t.Fatalf("clickhouse-server exited during start:\n%s", logs)
	return nil
}

// tryClickHouse is one start of startClickHouse: the server once it
// answers, or nil and its logs when it exited during start.
func tryClickHouse(t *testing.T, server, client, usersSnippet string) (*clickHouse, string) {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"data", "tmp", "user_files", "format_schemas", "log", "users.d"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tcpPort, httpPort := freeLoopbackPort(t), freeLoopbackPort(t)
	files := map[string]string{
		"config.xml":            fmt.Sprintf(clickHouseConfig, dir, tcpPort, httpPort),
		"users.xml":             string(mustRead(t, clickHouseUsersPath)),
		"users.d/fleetsync.xml": usersSnippet,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A file, not a buffer: the server writes it directly, with no copying
	// goroutine to race with the reads below.
	stdoutPath := filepath.Join(dir, "log", "stdout.log")
	stdout, err := os.Create(stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	cmd := exec.Command(server, "--config-file="+filepath.Join(dir, "config.xml"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = stdout, stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", server, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	c := &clickHouse{client: client, port: tcpPort}
	logs := func() string {
		out, _ := os.ReadFile(stdoutPath)
		errLog, _ := os.ReadFile(filepath.Join(dir, "log", "server.err.log"))
		return string(out) + string(errLog)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.query("default", "", "SELECT 1"); err == nil {
			return c, ""
		}
		select {
		case err := <-exited:
			exited <- err
			return nil, fmt.Sprintf("(%v)\n%s", err, logs())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("clickhouse-server on port %d did not answer within 60s:\n%s", tcpPort, logs())
		}
	}
}

// freeLoopbackPort is a port free now; startClickHouse tries again
// should it be taken before the server binds it.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clickHouseConfig is a minimal server configuration for 18.16: loopback
// only, everything under the test's directory (%[1]s), no interserver port.
const clickHouseConfig = `<?xml version="1.0"?>
<yandex>
  <logger>
    <level>warning</level>
    <log>%[1]s/log/server.log</log>
    <errorlog>%[1]s/log/server.err.log</errorlog>
  </logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>%[2]d</tcp_port>
  <http_port>%[3]d</http_port>
  <path>%[1]s/data/</path>
  <tmp_path>%[1]s/tmp/</tmp_path>
  <user_files_path>%[1]s/user_files/</user_files_path>
  <format_schema_path>%[1]s/format_schemas/</format_schema_path>
  <users_config>%[1]s/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
</yandex>
`

// clickHouseUsersPath is the users.xml of the module's shared test server
// (chserver): an unrestricted default user and the default quota the
// snippet's user refers to. This module reads it rather than importing
// chserver, so that it builds on its own.
const clickHouseUsersPath = "../load/clickhouse/chserver/users.xml"
