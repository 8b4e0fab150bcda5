package chserver

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
)

// hold binds port on loopback until the test ends, as another process
// that took it would.
func hold(t *testing.T, port int) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("hold port %d: %v", port, err)
	}
	t.Cleanup(func() { l.Close() })
}

func TestFreePortsAreDistinctBindableAndBelowTheEphemeralRange(t *testing.T) {
	hi := ephemeralLow()
	if hi < portsLow+1000 {
		t.Fatalf("ephemeral range starts at %d; this machine's range leaves no room below it", hi)
	}
	p := newPortPool(portsLow, hi)
	seen := map[int]bool{}
	for range 500 {
		port, err := p.free()
		if err != nil {
			t.Fatal(err)
		}
		if port < portsLow || port >= hi {
			t.Fatalf("port %d is outside [%d, %d): an outgoing connection could take it", port, portsLow, hi)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		if !portFree(port) {
			t.Fatalf("port %d cannot be bound right after it was handed out", port)
		}
	}
}

func TestAPoolNeverHandsOutAPortSomeoneHolds(t *testing.T) {
	base, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	lo := base - base%1000
	held := map[int]bool{}
	for port := lo; port < lo+1000; port += 2 {
		if portFree(port) {
			hold(t, port)
			held[port] = true
		}
	}
	p := newPortPool(lo, lo+1000)
	for range 200 {
		port, err := p.free()
		if err != nil {
			t.Fatal(err)
		}
		if held[port] {
			t.Fatalf("port %d handed out while a listener holds it", port)
		}
	}
}

func TestAPoolWithNoRoomBelowTheEphemeralRangeAsksTheKernel(t *testing.T) {
	p := newPortPool(portsLow, portsLow+10)
	port, err := p.free()
	if err != nil {
		t.Fatal(err)
	}
	if port >= portsLow && port < portsLow+10 || !portFree(port) {
		t.Fatalf("port %d: want one the kernel picked, bindable", port)
	}
}

func TestPortTakenReadsThePortClickHouseCouldNotBind(t *testing.T) {
	log := "2026.11.28 13:32:26.101761 [ 1 ] {} <Error> Application: Net Exception: Address already in use: 127.0.0.1:37837"
	if got := portTaken(log); got == nil || got.port != 37837 {
		t.Fatalf("portTaken = %+v, want port 37837", got)
	}
	if got := portTaken("<Error> Application: DB::Exception: Cannot lock file"); got != nil {
		t.Fatalf("portTaken = %+v on a log that tells of no port", got)
	}
}

func TestStartTriesAgainOnFreshPortsWhenOneItWasGivenIsTaken(t *testing.T) {
	taken, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	hold(t, taken)
	pool := newPortPool(portsLow, ephemeralLow())
	pool.next = []int{taken} // the native port: the first one picked
	srv, err := Start(context.Background(), Options{ports: pool})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer srv.Stop()
	if len(pool.next) != 0 || !pool.given[taken] {
		t.Fatalf("the held port %d was never given to the server", taken)
	}
	if srv.tcpPort == taken || !Reachable(context.Background(), srv.Addr()) {
		t.Fatalf("server on %s: want it on a fresh port, answering", srv.Addr())
	}
}

func TestStartOnAFixedPortThatIsTakenFailsAtOnceNamingIt(t *testing.T) {
	taken, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	hold(t, taken)
	pool := newPortPool(portsLow, ephemeralLow())
	_, err = Start(context.Background(), Options{TCPPort: taken, ports: pool})
	port, ok := takenPort(err)
	if !ok || port != taken || !errors.Is(err, errExited) {
		t.Fatalf("Start on held port %d: %v; want a takenError naming it", taken, err)
	}
	if len(pool.given) != 1 {
		t.Fatalf("%d ports given: want one start (its HTTP port), as fresh ports cannot free a fixed one", len(pool.given))
	}
}
