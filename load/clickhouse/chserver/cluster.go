package chserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"go.uber.org/zap"
)

// ClusterOptions configures StartCluster. The zero value starts 2 shards of
// 2 replicas named "fleet".
type ClusterOptions struct {
	// Name is the cluster's name in remote_servers; empty means "fleet".
	Name string
	// Shards and Replicas (per shard); 0 means 2 each.
	Shards, Replicas int
	// Server and ZooKeeper are the options of every server (its Extra,
	// Interserver and TCPPort are set here) and of ZooKeeper.
	Server    Options
	ZooKeeper ZooKeeperOptions
	// Logger receives start/stop events; nil means zap.NewNop().
	Logger *zap.Logger
	// PerShardReplicaNames names the replicas of every shard r1, r2, ...
	// (unique only within a shard, ClickHouse's own rule, as many clusters
	// are configured) instead of s1r1, s1r2, s2r1, ... (unique in the whole
	// cluster).
	PerShardReplicaNames bool
	// ReplicaName, when set, names replica r of shard s (both from 0)
	// instead, for tests of a misconfigured cluster.
	ReplicaName func(s, r int) string
}

// DDLPath is the ZooKeeper node of the cluster's distributed DDL queue.
const DDLPath = "/clickhouse/task_queue/ddl"

// Cluster is a ZooKeeper server and clickhouse-server processes forming one
// cluster of shards of replicas, all on loopback: the replicated, sharded
// warehouse in miniature. Every server knows the cluster (remote_servers,
// with internal_replication, as Replicated local tables want), its own
// {shard} and {replica} macros, the ZooKeeper and the DDL queue.
type Cluster struct {
	name string
	zk   *ZooKeeper
	// Nodes[shard][replica], both counted from 0.
	Nodes [][]*Server
	// opts are the options the cluster was started with (defaults
	// applied), for AddShard.
	opts ClusterOptions
	// names are the {replica} macros of servers that replaced others
	// (ReplaceServer), by shard and replica.
	names map[[2]int]string
	// healMu serializes HealDDLWorkers.
	healMu sync.Mutex
}

// StartCluster starts ZooKeeper, then every server at once, and waits until
// all answer. On failure whatever started is stopped.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Name == "" {
		opts.Name = "fleet"
	}
	if opts.Shards <= 0 {
		opts.Shards = 2
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 2
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Server.ports == nil {
		opts.Server.ports = defaultPorts
	}
	if opts.ZooKeeper.Logger == nil {
		opts.ZooKeeper.Logger = opts.Logger
	}
	zk, err := StartZooKeeper(ctx, opts.ZooKeeper)
	if err != nil {
		return nil, err
	}
	c := &Cluster{name: opts.Name, zk: zk, opts: opts}
	c.Nodes = make([][]*Server, opts.Shards)
	for s := range c.Nodes {
		c.Nodes[s] = make([]*Server, opts.Replicas)
	}
	if err := c.startShards(ctx, 0); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// reservePorts picks n free ports (a portPool never gives one twice).
func (c *Cluster) reservePorts(n int) ([]int, error) {
	out := make([]int, n)
	for i := range out {
		p, err := c.opts.Server.ports.free()
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// replicaName is the {replica} macro of replica r of shard s (from 0).
func (c *Cluster) replicaName(s, r int) string {
	if n, ok := c.names[[2]int{s, r}]; ok {
		return n
	}
	if c.opts.ReplicaName != nil {
		return c.opts.ReplicaName(s, r)
	}
	if c.opts.PerShardReplicaNames {
		return fmt.Sprintf("r%d", r+1)
	}
	return fmt.Sprintf("s%dr%d", s+1, r+1)
}

// nodeExtra is the configuration of replica r of shard s beyond a single
// server's: the cluster's remote_servers, ZooKeeper, its macros and the
// DDL queue.
func (c *Cluster) nodeExtra(remote string, s, r int) string {
	return remote + fmt.Sprintf(`
  <zookeeper>
    <node><host>127.0.0.1</host><port>%d</port></node>
    <session_timeout_ms>10000</session_timeout_ms>
  </zookeeper>
  <macros>
    <shard>%02d</shard>
    <replica>%s</replica>
  </macros>
  <distributed_ddl>
    <path>%s</path>
  </distributed_ddl>`, c.zk.Port(), s+1, c.replicaName(s, r), DDLPath)
}

// nodeOptions are the options of replica r of shard s, on the native
// port tcpPort, in the cluster that remote (remote_servers) describes: the
// cluster's server options, with an interserver port and the cluster's
// logger unless the server options name one.
func (c *Cluster) nodeOptions(remote string, s, r, tcpPort int) Options {
	o := c.opts.Server
	o.TCPPort = tcpPort
	o.Interserver = true
	if o.Logger == nil {
		o.Logger = c.opts.Logger
	}
	o.Extra = c.nodeExtra(remote, s, r)
	return o
}

// portAttempts is how many sets of native ports a cluster's start tries
// when one of them was taken before its server bound it.
const portAttempts = 3

// taken reports whether a start failed because a port was taken.
func taken(err error) bool {
	_, ok := takenPort(err)
	return ok
}

// startShards starts, at once, the servers of shards first.. (from 0) of
// c.Nodes on fresh native ports, as startShardsOn does. The native ports
// are in every server's remote_servers, so Start cannot change one that
// was taken before its server bound it (see portPool): the servers these
// shards started are stopped and the shards started again on fresh ports.
func (c *Cluster) startShards(ctx context.Context, first int) error {
	var err error
	for range portAttempts {
		ports := make([][]int, len(c.Nodes)-first)
		for i := range ports {
			if ports[i], err = c.reservePorts(len(c.Nodes[first+i])); err != nil {
				return err
			}
		}
		err = c.startShardsOn(ctx, ports, first)
		if err == nil || ctx.Err() != nil || !taken(err) {
			return err
		}
		c.opts.Logger.Warn("a port of the cluster was taken before its server bound it; starting the shards again on fresh ports", zap.Error(err))
		for _, shard := range c.Nodes[first:] {
			for r, n := range shard {
				if n != nil {
					_ = n.Stop()
					shard[r] = nil
				}
			}
		}
	}
	return err
}

// startShardsOn starts, at once, the servers of shards first.. (from 0) on
// the native ports ports[shard-first][replica], each knowing the whole
// cluster (every shard of c.Nodes), and waits for their ZooKeeper
// sessions. c.Nodes must already have a slot for each.
func (c *Cluster) startShardsOn(ctx context.Context, ports [][]int, first int) error {
	remote := remoteServers(c.name, c.nativePorts(ports, first))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range ports {
		s := first + i
		for r := range ports[i] {
			o := c.nodeOptions(remote, s, r, ports[i][r])
			wg.Add(1)
			go func(s, r int, o Options) {
				defer wg.Done()
				srv, err := Start(ctx, o)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("shard %d replica %d: %w", s+1, r+1, err))
					return
				}
				c.Nodes[s][r] = srv
			}(s, r, o)
		}
	}
	wg.Wait()
	if len(errs) == 0 {
		for i := range ports {
			for r, n := range c.Nodes[first+i] {
				if err := n.awaitZooKeeper(ctx); err != nil {
					errs = append(errs, fmt.Errorf("shard %d replica %d: %w", first+i+1, r+1, err))
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("start clickhouse cluster: %w", errors.Join(errs...))
	}
	return nil
}

// nativePorts are the native ports of every shard: those of the running
// shards before first, then ports.
func (c *Cluster) nativePorts(ports [][]int, first int) [][]int {
	all := make([][]int, 0, first+len(ports))
	for _, shard := range c.Nodes[:first] {
		p := make([]int, len(shard))
		for r, n := range shard {
			p[r] = n.tcpPort
		}
		all = append(all, p)
	}
	return append(all, ports...)
}

// ReplicaName is the {replica} macro of replica r of shard s (from 0).
func (c *Cluster) ReplicaName(s, r int) string { return c.replicaName(s, r) }

// ReplaceServer replaces replica r of shard s (from 0) by a new, empty
// server, the way an operator replaces a machine: the new server gets the
// same {shard}, a {replica} name its shard has not used (the old one with
// "-2" appended, then "-3", ...) and a new port; the old server is stopped
// and its directory removed; the new host takes the old one's place in
// remote_servers on every server, which reload it. Nothing is created on
// the new server: that is `fleetsync migrate`'s work (ON CLUSTER).
func (c *Cluster) ReplaceServer(ctx context.Context, s, r int) error {
	old := c.Nodes[s][r]
	name := c.replicaName(s, r)
	base, n := name, 2
	if i := strings.LastIndex(name, "-"); i > 0 {
		if k, err := strconv.Atoi(name[i+1:]); err == nil {
			base, n = name[:i], k+1
		}
	}
	if c.names == nil {
		c.names = map[[2]int]string{}
	}
	c.names[[2]int{s, r}] = fmt.Sprintf("%s-%d", base, n)
	if err := old.Stop(); err != nil {
		return fmt.Errorf("replace shard %d replica %d: stop the old server: %w", s+1, r+1, err)
	}
	if err := c.startReplica(ctx, s, r); err != nil {
		return fmt.Errorf("replace shard %d replica %d: %w", s+1, r+1, err)
	}
	fresh := c.Nodes[s][r]
	if err := c.reloadRemoteServers(ctx, func(srv *Server) bool { return srv == fresh }); err != nil {
		return fmt.Errorf("replace shard %d replica %d: %w", s+1, r+1, err)
	}
	return nil
}

// startReplica starts replica r of shard s on a fresh native port,
// knowing the cluster with that port in shard s, and puts it in c.Nodes.
// Only this server knows the port yet, so one taken before the server
// bound it is replaced by another.
func (c *Cluster) startReplica(ctx context.Context, s, r int) error {
	var (
		srv *Server
		err error
	)
	for range portAttempts {
		var port []int
		if port, err = c.reservePorts(1); err != nil {
			return err
		}
		all := c.nativePorts(nil, len(c.Nodes))
		all[s][r] = port[0]
		srv, err = Start(ctx, c.nodeOptions(remoteServers(c.name, all), s, r, port[0]))
		if err == nil || ctx.Err() != nil || !taken(err) {
			break
		}
	}
	if err != nil {
		return err
	}
	c.Nodes[s][r] = srv
	return srv.awaitZooKeeper(ctx)
}

// reloadRemoteServers writes every server's configuration again with the
// cluster as c.Nodes has it (but those skip says are already so) and
// waits until every server lists each server's port in system.clusters.
func (c *Cluster) reloadRemoteServers(ctx context.Context, skip func(*Server) bool) error {
	remote := remoteServers(c.name, c.nativePorts(nil, len(c.Nodes)))
	for s, shard := range c.Nodes {
		for r, n := range shard {
			if skip(n) {
				continue
			}
			n.extra = c.nodeExtra(remote, s, r)
			if err := n.writeConfig(); err != nil {
				return fmt.Errorf("server %s: %w", n.Addr(), err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var ports []string
	for _, shard := range c.nativePorts(nil, len(c.Nodes)) {
		for _, p := range shard {
			ports = append(ports, strconv.Itoa(p))
		}
	}
	q := fmt.Sprintf("SELECT count() FROM system.clusters WHERE cluster = '%s' HAVING count() = %d AND countIf(port IN (%s)) = %d",
		c.name, len(ports), strings.Join(ports, ", "), len(ports))
	for _, shard := range c.Nodes {
		for _, n := range shard {
			for queryOne(ctx, n.Addr(), q) != nil {
				select {
				case <-ctx.Done():
					return fmt.Errorf("server %s does not list the cluster's servers in system.clusters after a minute", n.Addr())
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// AddShard grows the running cluster by one shard of as many replicas as
// the others, the way an operator does: it starts the new servers, which
// know the whole cluster, then appends the shard to the remote_servers of
// every running server (ClickHouse reloads it without a restart) and waits
// until every server lists it in system.clusters. Replicated and
// Distributed tables are not created on the new servers: that is
// `fleetsync migrate`'s work (ON CLUSTER).
func (c *Cluster) AddShard(ctx context.Context) error {
	first := len(c.Nodes)
	c.Nodes = append(c.Nodes, make([]*Server, c.opts.Replicas))
	if err := c.startShards(ctx, first); err != nil {
		return fmt.Errorf("add shard %d: %w", first+1, err)
	}
	fresh := c.Nodes[first]
	if err := c.reloadRemoteServers(ctx, func(n *Server) bool { return slices.Contains(fresh, n) }); err != nil {
		return fmt.Errorf("add shard %d: %w", first+1, err)
	}
	return nil
}

// awaitZooKeeper waits until the server has a ZooKeeper session, and
// starts it again should it have died meanwhile: 18.16 can crash when its
// first session attempt, made during start, fails.
func (s *Server) awaitZooKeeper(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()
	for {
		if s.PID() == 0 {
			s.log.Warn("clickhouse-server died while joining ZooKeeper; starting it again", zap.String("addr", s.Addr()))
			if err := s.Resume(ctx); err != nil {
				return err
			}
		}
		if err := queryOne(ctx, s.Addr(), "SELECT count() FROM system.zookeeper WHERE path = '/'"); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clickhouse-server on %s has no ZooKeeper session after %s: %s", s.Addr(), s.startTimeout, s.logTail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// queryOne runs a one-value query on a short-lived connection.
func queryOne(ctx context.Context, addr, query string) error {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Username: "default"}, DialTimeout: time.Second, MaxOpenConns: 1})
	if err != nil {
		return err
	}
	defer conn.Close()
	var n uint64
	return conn.QueryRow(ctx, query).Scan(&n)
}

// remoteServers is the cluster's remote_servers section: one shard element
// per shard, each with internal_replication, so that a Distributed table
// writes each row to one replica and the Replicated table copies it.
func remoteServers(name string, ports [][]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n  <remote_servers>\n    <%s>\n", name)
	for _, shard := range ports {
		b.WriteString("      <shard>\n        <internal_replication>true</internal_replication>\n")
		for _, p := range shard {
			fmt.Fprintf(&b, "        <replica><host>127.0.0.1</host><port>%d</port></replica>\n", p)
		}
		b.WriteString("      </shard>\n")
	}
	fmt.Fprintf(&b, "    </%s>\n  </remote_servers>", name)
	return b.String()
}

// Resume starts a killed server of the cluster again and waits for its
// ZooKeeper session. Until ZooKeeper expires the killed process's session
// (seconds), 18.16 refuses to start on its replicated tables ("replica is
// already active"), so a start that exits is tried again until the start
// timeout passes.
//
// Every start is made with the force_restore_data flag, ClickHouse's own
// recovery for a replica that died: a server killed in the middle of an
// INSERT or a merge may hold parts ZooKeeper never recorded, or lack parts
// it did, and 18.16 then refuses to load the table ("the local set of parts
// ... doesn't look like the set of parts in ZooKeeper") unless the flag is
// there; with it, the server detaches the unexpected parts and fetches the
// missing ones from the other replica. Whether the kill left such parts
// depends on the moment it landed, so without the flag a restart would
// fail at random.
func (c *Cluster) Resume(ctx context.Context, n *Server) error {
	ctx, cancel := context.WithTimeout(ctx, n.startTimeout+30*time.Second)
	defer cancel()
	for {
		if err := n.forceRestoreData(); err != nil {
			return err
		}
		err := n.Resume(ctx)
		if err == nil {
			return n.awaitZooKeeper(ctx)
		}
		if !errors.Is(err, errExited) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// forceRestoreData sets the flag that makes the next start of the server
// recover its replicated tables from ZooKeeper and the other replicas
// (see Cluster.Resume); the server removes it once it has started.
func (s *Server) forceRestoreData() error {
	flags := filepath.Join(s.dir, "data", "flags")
	if err := os.MkdirAll(flags, 0o755); err != nil {
		return fmt.Errorf("set force_restore_data: %w", err)
	}
	if err := os.WriteFile(filepath.Join(flags, "force_restore_data"), nil, 0o644); err != nil {
		return fmt.Errorf("set force_restore_data: %w", err)
	}
	return nil
}

// Name is the cluster's name, for clickhouse.cluster.
func (c *Cluster) Name() string { return c.name }

// ZooKeeper is the cluster's coordinator.
func (c *Cluster) ZooKeeper() *ZooKeeper { return c.zk }

// Addrs are the native addresses of every server, shard by shard.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, shard := range c.Nodes {
		for _, n := range shard {
			out = append(out, n.Addr())
		}
	}
	return out
}

// Stop stops every server, then ZooKeeper, each by its PID, and removes
// their directories. It is idempotent.
func (c *Cluster) Stop() error {
	var wg sync.WaitGroup
	errs := make([]error, 0, 8)
	var mu sync.Mutex
	for _, shard := range c.Nodes {
		for _, n := range shard {
			if n == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := n.Stop(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if c.zk != nil {
		errs = append(errs, c.zk.Stop())
	}
	return errors.Join(errs...)
}

// ddlWorkerDied is what 18.16 logs when its distributed DDL thread gives
// up for good: two replicas of a shard racing for an ALTER ... ON CLUSTER
// of a replicated table can both execute it, and the second one's
// "executed" node then exists (ZooKeeper error 999, "Node exists"). The
// server keeps running, but every later ON CLUSTER statement waits for it
// until its timeout; a restart brings the thread back.
const ddlWorkerDied = "DDLWorker: Unexpected ZooKeeper error"

// HealDDLWorkers restarts, by PID, each running server whose distributed
// DDL thread died since the last call (see ddlWorkerDied; a server's error
// log is read for it), and returns their addresses. A test calls it before
// it starts, so that one test's race inside ClickHouse does not fail every
// test after it, and after an ON CLUSTER statement failed, to tell that
// failure from its own.
func (c *Cluster) HealDDLWorkers(ctx context.Context) ([]string, error) {
	c.healMu.Lock()
	defer c.healMu.Unlock()
	var healed []string
	for _, shard := range c.Nodes {
		for _, n := range shard {
			if n == nil || n.PID() == 0 {
				continue
			}
			log, err := os.ReadFile(filepath.Join(n.Dir(), "log", "server.err.log"))
			if err != nil {
				continue // no error log yet: nothing died
			}
			deaths := strings.Count(string(log), ddlWorkerDied)
			if deaths <= n.ddlDeaths {
				continue
			}
			n.ddlDeaths = deaths
			if err := n.Kill(); err != nil {
				return healed, fmt.Errorf("restart %s, whose DDL worker died: %w", n.Addr(), err)
			}
			if err := c.Resume(ctx, n); err != nil {
				return healed, fmt.Errorf("restart %s, whose DDL worker died: %w", n.Addr(), err)
			}
			healed = append(healed, n.Addr())
		}
	}
	return healed, nil
}
