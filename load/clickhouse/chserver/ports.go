package chserver

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// portPool hands out loopback ports for servers this process is about to
// start. A server binds its port only when it runs, so any port picked
// beforehand can be taken in between; portPool makes that rare enough for a
// retry (see Start) to cover it:
//
//   - It picks below the kernel's ephemeral range (ip_local_port_range).
//     Listening on :0 returns a port from that range, which every outgoing
//     connection on the machine also draws from: a test run opens
//     thousands, and one of them took a cluster's interserver port between
//     the pick and the bind.
//   - It never hands out a port twice, so the servers a cluster starts at
//     once, or two tests of one binary, never pick the same one.
//   - It picks at random, so two test binaries picking at once rarely
//     meet; Start tries again on fresh ports when they do.
type portPool struct {
	mu     sync.Mutex
	given  map[int]bool
	lo, hi int // picks are in [lo, hi)
	// next are handed out first, unchecked: a test hands out a port it
	// holds, as if another process had bound it after the pick.
	next []int
}

// portsLow is the lowest port a portPool picks: above the well-known and most
// registered service ports (ZooKeeper's 2181, ClickHouse's 8123 and 9000).
const portsLow = 10000

// newPortPool picks in [lo, hi); when that holds fewer than 1000 ports
// (an unusual ephemeral range) it falls back to :0.
func newPortPool(lo, hi int) *portPool {
	return &portPool{given: map[int]bool{}, lo: lo, hi: hi}
}

// defaultPorts serves Start, StartZooKeeper and the clusters of one
// process. It is shared because collisions are between every server the
// process starts, whichever test starts it; it holds no configuration.
var defaultPorts = newPortPool(portsLow, ephemeralLow())

// FreePort is a loopback port no server of this process was given and
// that can be bound now, for a server (ClickHouse, ZooKeeper, Prometheus,
// a Pushgateway) the caller is about to start.
func FreePort() (int, error) { return defaultPorts.free() }

// free is a port this pool never handed out that can be bound now.
func (p *portPool) free() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.next) > 0 {
		port := p.next[0]
		p.next = p.next[1:]
		p.given[port] = true
		return port, nil
	}
	if p.hi-p.lo >= 1000 {
		if len(p.given) > (p.hi-p.lo)/2 {
			// A process that started thousands of servers has stopped
			// most of them; start over rather than search a full set.
			clear(p.given)
		}
		for range 200 {
			port := p.lo + rand.IntN(p.hi-p.lo)
			if p.given[port] || !portFree(port) {
				continue
			}
			p.given[port] = true
			return port, nil
		}
	}
	for range 20 {
		port, err := listenZero()
		if err != nil {
			return 0, err
		}
		if !p.given[port] {
			p.given[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free loopback port: every port tried was busy or already given")
}

// listenZero is a port the kernel picks, from the ephemeral range.
func listenZero() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// when it cannot be read (then the pool uses :0).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

// takenError is a start that failed because a port the server was given
// was bound by someone else first; a start on fresh ports can succeed.
type takenError struct {
	// port is the port the server's log names, 0 when it names none.
	port int
}

func (e *takenError) Error() string {
	if e.port == 0 {
		return "a port it was given was taken before it bound it"
	}
	return fmt.Sprintf("port %d was taken before it bound it", e.port)
}

// inUse finds ClickHouse's report of a port it could not bind, as
// "Address already in use: 127.0.0.1:37837".
var inUse = regexp.MustCompile(`Address already in use(?:: \S*:(\d+))?`)

// portTaken is the takenError a server's log tells of, nil when the log
// tells of none.
func portTaken(log string) *takenError {
	m := inUse.FindStringSubmatch(log)
	if m == nil {
		return nil
	}
	port, _ := strconv.Atoi(m[1])
	return &takenError{port: port}
}

// takenPort is the port a start's error says was taken (0 when it names
// none), and whether the error tells of a taken port at all.
func takenPort(err error) (int, bool) {
	var t *takenError
	if !errors.As(err, &t) {
		return 0, false
	}
	return t.port, true
}
