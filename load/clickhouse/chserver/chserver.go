// Package chserver starts a private ClickHouse server (Debian's
// clickhouse-server) in a directory of its own on free loopback ports, for the
// integration tests and for cmd/fleetsync-demo. It can kill and resume that
// server on the same data directory and port, so fault tests can take
// ClickHouse away in the middle of a sync cycle.
//
// Only the process this package started is ever signalled, by its PID.
package chserver

import (
	"bytes"
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"
)

// EnvBinary names the environment variable that overrides the path of the
// clickhouse-server binary.
const EnvBinary = "FLEETSYNC_CLICKHOUSE_SERVER"

// DefaultBinary is where Debian installs clickhouse-server.
const DefaultBinary = "/usr/sbin/clickhouse-server"

// stopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
const stopGrace = 15 * time.Second

// Options configures Start. The zero value starts a throwaway server in a
// fresh temporary directory on free ports.
type Options struct {
	// Binary is the clickhouse-server executable; empty means $FLEETSYNC_CLICKHOUSE_SERVER,
	// else DefaultBinary.
	Binary string
	// Dir is the server's working directory (config, data, logs). When set it
	// is created if missing and kept by Stop, so a demo can reuse its data;
	// when empty a fresh temporary directory is created and Stop removes it.
	Dir string
	// TCPPort is the native-protocol port; 0 picks a free one.
	TCPPort int
	// StartTimeout bounds how long Start and Resume wait for the server to
	// answer; 0 means 60s (a loaded 2-core machine can take a while).
	StartTimeout time.Duration
	// Logger receives start/stop events; nil means zap.NewNop().
	Logger *zap.Logger
	// TLS, when set, serves the native protocol over TLS only: TCPPort
	// becomes tcp_port_secure and no plain native port is opened.
	TLS *TLSOptions
	// Users adds users beside the password-less default one, by name with
	// their password (tests of a password that must never be logged).
	Users map[string]string
	// Extra is XML placed inside the configuration's root element: a
	// cluster's remote_servers, macros, zookeeper and distributed_ddl.
	Extra string
	// Interserver also binds an interserver HTTP port on loopback, from
	// which the server's replicas fetch parts.
	Interserver bool

	// ports hands out the ports the options do not fix; nil means the
	// process's own (FreePort).
	ports *portPool
}

// Server is a running (or killed and resumable) clickhouse-server process.
type Server struct {
	binary   string
	dir      string
	ownDir   bool
	tcpPort  int
	httpPort int
	// interPort is the interserver HTTP port, 0 when none is bound.
	interPort    int
	interserver  bool
	extra        string
	startTimeout time.Duration
	log          *zap.Logger
	// externalAddr is set for a server this package did not start.
	externalAddr string
	// tls is the server's TLS setup, nil for plain TCP; probe is how this
	// package's own readiness checks dial it.
	tls   *TLSOptions
	probe *tls.Config
	users map[string]string
	ports *portPool
	// ddlDeaths counts the deaths of the server's distributed DDL thread
	// Cluster.HealDDLWorkers has restarted it for.
	ddlDeaths int

	mu   sync.Mutex
	proc *process
}

// process is one run of the server binary.
type process struct {
	pid  int
	done chan struct{} // closed when the process has exited
	err  error         // the exit status, valid after done is closed
	cmd  *exec.Cmd
}

// ErrExternal is returned by Kill and Resume on a server this package did
// not start (one given by FLEETSYNC_TEST_CLICKHOUSE_ADDR): it is not ours to
// signal.
var ErrExternal = errors.New("clickhouse server was not started by chserver; it cannot be killed or resumed")

// Start writes a configuration into a directory of its own, starts
// clickhouse-server there on loopback and waits until it answers a native
// `SELECT 1`. ctx bounds only the start, not the server's life.
func Start(ctx context.Context, opts Options) (*Server, error) {
	s := &Server{
		binary:       opts.Binary,
		dir:          opts.Dir,
		tcpPort:      opts.TCPPort,
		startTimeout: opts.StartTimeout,
		log:          opts.Logger,
		tls:          opts.TLS,
		users:        opts.Users,
		interserver:  opts.Interserver,
		extra:        opts.Extra,
		ports:        opts.ports,
	}
	if s.ports == nil {
		s.ports = defaultPorts
	}
	if s.tls != nil {
		probe, err := s.tls.probeConfig()
		if err != nil {
			return nil, err
		}
		s.probe = probe
	}
	if s.binary == "" {
		s.binary = os.Getenv(EnvBinary)
	}
	if s.binary == "" {
		s.binary = DefaultBinary
	}
	if s.startTimeout <= 0 {
		s.startTimeout = 60 * time.Second
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if _, err := os.Stat(s.binary); err != nil {
		return nil, fmt.Errorf("clickhouse-server binary: %w (install clickhouse-server or set %s)", err, EnvBinary)
	}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "fleetsync-clickhouse-")
		if err != nil {
			return nil, fmt.Errorf("clickhouse server dir: %w", err)
		}
		s.dir, s.ownDir = d, true
	} else {
		abs, err := filepath.Abs(s.dir)
		if err != nil {
			return nil, fmt.Errorf("clickhouse server dir %s: %w", s.dir, err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, fmt.Errorf("clickhouse server dir: %w", err)
		}
		s.dir = abs
	}

	// A port picked free may be taken by someone else before the server
	// binds it (see portPool): a start that fails so is tried again with
	// fresh ports (but a native port the options fix: a cluster's are in
	// every server's remote_servers, so the cluster retries those, see
	// startShards).
	fixedTCP := opts.TCPPort != 0
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.pickPorts(fixedTCP); err != nil {
			break
		}
		if err = s.writeConfig(); err != nil {
			break
		}
		err = s.launch(ctx)
		if err == nil {
			return s, nil
		}
		port, taken := takenPort(err)
		retry := (taken && !(fixedTCP && port == s.tcpPort)) || (!fixedTCP && errors.Is(err, errExited))
		if ctx.Err() != nil || !retry {
			break
		}
	}
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
	return nil, err
}

// External wraps a server this package did not start, reachable at addr, so
// tests can share one given by the environment. Kill and Resume return
// ErrExternal on it; Stop leaves it alone.
func External(addr string) *Server {
	return &Server{externalAddr: addr, log: zap.NewNop()}
}

// Addr is the native-protocol address, "127.0.0.1:PORT" (or the external
// server's address).
func (s *Server) Addr() string {
	if s.externalAddr != "" {
		return s.externalAddr
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tcpPort))
}

// Dir is the server's working directory; empty for an external server.
func (s *Server) Dir() string { return s.dir }

// PID is the process id of the running server, 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	select {
	case <-s.proc.done:
		return 0
	default:
		return s.proc.pid
	}
}

// Kill ends the server abruptly with SIGKILL, as a crash would, and keeps its
// directory and port so Resume can bring it back with the same data.
func (s *Server) Kill() error {
	if s.externalAddr != "" {
		return ErrExternal
	}
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	s.log.Info("killing clickhouse-server", zap.Int("pid", p.pid))
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return nil
}

// Resume starts the server again on the same directory and port after Kill
// (or after it died) and waits until it answers. It is a no-op when the server
// is running.
func (s *Server) Resume(ctx context.Context) error {
	if s.externalAddr != "" {
		return ErrExternal
	}
	if s.PID() != 0 {
		return nil
	}
	// A killed server's sockets can hold its ports for a moment; wait until
	// both can be bound again rather than fail the start.
	wctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()
	for !portFree(s.tcpPort) || !portFree(s.httpPort) || (s.interPort != 0 && !portFree(s.interPort)) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("resume clickhouse-server: ports %d/%d still busy: %w", s.tcpPort, s.httpPort, wctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return s.launch(ctx)
}

// Stop ends the server with SIGTERM, then SIGKILL after a grace period, and
// removes its directory when Start created it. Stop is idempotent.
func (s *Server) Stop() error {
	if s.externalAddr != "" {
		return nil
	}
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		select {
		case <-p.done:
		default:
			s.log.Info("stopping clickhouse-server", zap.Int("pid", p.pid))
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(stopGrace):
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
				<-p.done
			}
		}
	}
	if s.ownDir {
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("remove clickhouse server dir: %w", err)
		}
	}
	return nil
}

// errExited marks a server that exited before it answered.
var errExited = errors.New("clickhouse-server exited during start")

// portFree reports whether a loopback port can be bound now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// pickPorts gives the server fresh free ports: HTTP, interserver when it
// binds one, and native unless keepTCP.
func (s *Server) pickPorts(keepTCP bool) error {
	var err error
	if !keepTCP {
		if s.tcpPort, err = s.ports.free(); err != nil {
			return err
		}
	}
	if s.httpPort, err = s.ports.free(); err != nil {
		return err
	}
	if s.interserver {
		if s.interPort, err = s.ports.free(); err != nil {
			return err
		}
	}
	return nil
}

// launch starts the binary on the current configuration and waits until it
// answers, or exits, or the start timeout passes.
func (s *Server) launch(ctx context.Context) error {
	for _, sub := range []string{"data", "tmp", "user_files", "format_schemas", "log"} {
		if err := os.MkdirAll(filepath.Join(s.dir, sub), 0o755); err != nil {
			return fmt.Errorf("clickhouse server dir: %w", err)
		}
	}
	// Each run's own log starts empty so a start failure reports this run's
	// errors only.
	errLog := filepath.Join(s.dir, "log", "server.err.log")
	_ = os.Remove(errLog)
	out, err := os.OpenFile(filepath.Join(s.dir, "log", "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("clickhouse server log: %w", err)
	}

	p, err := spawn(s.binary, s.dir, out)
	out.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", s.binary, err)
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	s.log.Info("started clickhouse-server", zap.Int("pid", p.pid), zap.String("addr", s.Addr()), zap.String("dir", s.dir))

	wctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()
	for {
		if reachable(wctx, s.Addr(), s.probe) {
			return nil
		}
		select {
		case <-p.done:
			tail := s.logTail()
			if t := portTaken(tail); t != nil {
				return fmt.Errorf("%w: %w (%v, on %s): %s", errExited, t, p.err, s.Addr(), tail)
			}
			return fmt.Errorf("%w (%v, on %s): %s", errExited, p.err, s.Addr(), tail)
		case <-wctx.Done():
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			return fmt.Errorf("clickhouse-server on %s did not answer within %s: %s", s.Addr(), s.startTimeout, s.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// spawn starts the server and a goroutine that reaps it. On Linux the child
// gets SIGKILL if the thread that forked it dies, so a crashed test binary
// leaves no server behind; that goroutine therefore keeps its OS thread until
// the child has exited.
func spawn(binary, dir string, out *os.File) (*process, error) {
	cmd := exec.Command(binary, "--config-file="+filepath.Join(dir, "config.xml"))
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	return spawnCmd(cmd)
}

// spawnCmd starts cmd as spawn describes, in its own process group.
func spawnCmd(cmd *exec.Cmd) (*process, error) {
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd.SysProcAttr = sysProcAttr()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.cmd = cmd
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// logTail is the end of this run's error log, for start failures.
func (s *Server) logTail() string {
	var b []byte
	for _, name := range []string{"server.err.log", "stdout.log"} {
		data, err := os.ReadFile(filepath.Join(s.dir, "log", name))
		if err == nil {
			b = append(b, data...)
		}
	}
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return "(no server log output)"
	}
	return string(b)
}

// Reachable reports whether a ClickHouse server answers `SELECT 1` over the
// native protocol at addr (user default, no password) before ctx ends or 2s
// pass.
func Reachable(ctx context.Context, addr string) bool { return reachable(ctx, addr, nil) }

// reachable is Reachable over TLS with tc, or plain TCP when tc is nil.
func reachable(ctx context.Context, addr string, tc *tls.Config) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:         []string{addr},
		Auth:         clickhouse.Auth{Username: "default"},
		DialTimeout:  time.Second,
		MaxOpenConns: 1,
		TLS:          tc,
	})
	if err != nil {
		return false
	}
	defer conn.Close()
	var one uint8
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one) == nil && one == 1
}

func (s *Server) writeConfig() error {
	var buf bytes.Buffer
	data := map[string]any{"Dir": s.dir, "TCPPort": s.tcpPort, "HTTPPort": s.httpPort, "TLS": s.tls, "InterPort": s.interPort, "Extra": s.extra}
	if err := configTemplate.Execute(&buf, data); err != nil {
		return fmt.Errorf("render clickhouse config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "config.xml"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write clickhouse config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "users.xml"), []byte(withUsers(usersXML, s.users)), 0o600); err != nil {
		return fmt.Errorf("write clickhouse users: %w", err)
	}
	return nil
}

// configTemplate is a minimal server configuration accepted by 18.16 and by
// current releases (which still read a <yandex> root). No interserver port is
// configured, so only the two loopback ports are bound; the query and part
// logs are left off to spare a small machine the background work.
var configTemplate = template.Must(template.New("config").Parse(`<?xml version="1.0"?>
<yandex>
  <logger>
    <level>warning</level>
    <log>{{.Dir}}/log/server.log</log>
    <errorlog>{{.Dir}}/log/server.err.log</errorlog>
    <size>10M</size>
    <count>1</count>
  </logger>
  <listen_host>127.0.0.1</listen_host>
{{- if .TLS}}
  <tcp_port_secure>{{.TCPPort}}</tcp_port_secure>
  <openSSL>
    <server>
      <certificateFile>{{.TLS.CertFile}}</certificateFile>
      <privateKeyFile>{{.TLS.KeyFile}}</privateKeyFile>
{{- if .TLS.ClientCAFile}}
      <caConfig>{{.TLS.ClientCAFile}}</caConfig>
      <verificationMode>strict</verificationMode>
{{- else}}
      <verificationMode>none</verificationMode>
{{- end}}
      <loadDefaultCAFile>false</loadDefaultCAFile>
      <cacheSessions>true</cacheSessions>
      <disableProtocols>sslv2,sslv3</disableProtocols>
      <preferServerCiphers>true</preferServerCiphers>
      <invalidCertificateHandler><name>RejectCertificateHandler</name></invalidCertificateHandler>
    </server>
  </openSSL>
{{- else}}
  <tcp_port>{{.TCPPort}}</tcp_port>
{{- end}}
  <http_port>{{.HTTPPort}}</http_port>
  <path>{{.Dir}}/data/</path>
  <tmp_path>{{.Dir}}/tmp/</tmp_path>
  <user_files_path>{{.Dir}}/user_files/</user_files_path>
  <format_schema_path>{{.Dir}}/format_schemas/</format_schema_path>
  <users_config>{{.Dir}}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
{{- if .InterPort}}
  <interserver_http_port>{{.InterPort}}</interserver_http_port>
  <interserver_http_host>127.0.0.1</interserver_http_host>
{{- end}}
{{.Extra}}
</yandex>
`))

// usersXML is the default user with no password and no quota limits. It is
// a file of its own because the deploy tests, a separate module, start
// their server with it too.
//
//go:embed users.xml
var usersXML string
