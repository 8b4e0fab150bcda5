package chserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// ZooKeeperOptions configures StartZooKeeper. The zero value runs Debian's
// zookeeper package with a 64 MB heap.
type ZooKeeperOptions struct {
	// Java is the java executable; empty means "java" on PATH.
	Java string
	// Classpath lists the jars of the server; empty means Debian's
	// (/usr/share/java: zookeeper, its jute, and slf4j).
	Classpath []string
	// StartTimeout bounds the wait until the server answers; 0 means 60s.
	StartTimeout time.Duration
	// Logger receives start/stop events; nil means zap.NewNop().
	Logger *zap.Logger
}

// debianZooKeeperJars are the jars that Debian's zookeeper package puts in
// /usr/share/java and that a standalone server needs.
var debianZooKeeperJars = []string{"zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar"}

// ZooKeeper is a standalone ZooKeeper server in a temporary directory on a
// free loopback port, for the ClickHouse cluster of the tests.
type ZooKeeper struct {
	dir  string
	port int
	proc *process
	log  *zap.Logger
}

// StartZooKeeper writes a zoo.cfg into a fresh temporary directory and runs
// ZooKeeper's QuorumPeerMain (standalone, as no peers are listed) with a
// small heap, and waits until it serves sessions. ctx bounds only the start.
func StartZooKeeper(ctx context.Context, opts ZooKeeperOptions) (*ZooKeeper, error) {
	java := opts.Java
	if java == "" {
		java = "java"
	}
	cp := opts.Classpath
	if len(cp) == 0 {
		for _, j := range debianZooKeeperJars {
			cp = append(cp, filepath.Join("/usr/share/java", j))
		}
	}
	for _, j := range cp {
		if _, err := os.Stat(j); err != nil {
			return nil, fmt.Errorf("zookeeper: %w (install Debian's zookeeper package)", err)
		}
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	dir, err := os.MkdirTemp("", "fleetsync-zookeeper-")
	if err != nil {
		return nil, fmt.Errorf("zookeeper dir: %w", err)
	}
	z := &ZooKeeper{dir: dir, log: opts.Logger}
	for attempt := 0; attempt < 3; attempt++ {
		if err = z.launch(ctx, java, cp, opts.StartTimeout); err == nil {
			return z, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

func (z *ZooKeeper) launch(ctx context.Context, java string, cp []string, timeout time.Duration) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	z.port = port
	data := filepath.Join(z.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("zookeeper dir: %w", err)
	}
	// A short tick keeps session expiry (2-20 ticks) quick for tests that
	// kill a server; the admin server (Jetty) is off, as are the four
	// letter words other than srvr, the readiness check.
	cfg := fmt.Sprintf("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
		"maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n", data, port)
	cfgPath := filepath.Join(z.dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("write zoo.cfg: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(z.dir, "zookeeper.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("zookeeper log: %w", err)
	}
	cmd := exec.Command(java, "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-cp", strings.Join(cp, ":"), "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
	cmd.Dir = z.dir
	cmd.Stdout, cmd.Stderr = out, out
	p, err := spawnCmd(cmd)
	out.Close()
	if err != nil {
		return fmt.Errorf("start zookeeper: %w", err)
	}
	z.proc = p
	z.log.Info("started zookeeper", zap.Int("pid", p.pid), zap.String("addr", z.Addr()))
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if serving(z.Addr()) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("zookeeper exited during start (%v): %s", p.err, z.logTail())
		case <-wctx.Done():
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			return fmt.Errorf("zookeeper on %s did not answer within %s: %s", z.Addr(), timeout, z.logTail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// serving asks the server's state with "srvr": it names its Mode once it
// serves sessions. ("ruok" answers imok earlier, while sessions are still
// refused, and ClickHouse 18.16 crashes later when its first session
// attempt at startup fails.)
func serving(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return strings.Contains(string(b), "Mode: ")
}

// Addr is the client address, "127.0.0.1:PORT".
func (z *ZooKeeper) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(z.port)) }

// Port is the client port.
func (z *ZooKeeper) Port() int { return z.port }

// PID is the server's process id.
func (z *ZooKeeper) PID() int { return z.proc.pid }

// Stop ends the server (SIGTERM, then SIGKILL after a grace period) and
// removes its directory. It is idempotent.
func (z *ZooKeeper) Stop() error {
	if z.proc != nil {
		select {
		case <-z.proc.done:
		default:
			z.log.Info("stopping zookeeper", zap.Int("pid", z.proc.pid))
			_ = z.proc.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-z.proc.done:
			case <-time.After(stopGrace):
				_ = z.proc.cmd.Process.Signal(syscall.SIGKILL)
				<-z.proc.done
			}
		}
	}
	return os.RemoveAll(z.dir)
}

func (z *ZooKeeper) logTail() string {
	b, _ := os.ReadFile(filepath.Join(z.dir, "zookeeper.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
