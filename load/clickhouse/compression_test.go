package clickhouse

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

func TestCompressionAutoIsLZ4OnlyToARemoteServer(t *testing.T) {
	tests := []struct {
		method string
		addrs  []string
		want   clickhouse.CompressionMethod
	}{
		{"auto", []string{"127.0.0.1:9000"}, clickhouse.CompressionNone},
		{"", []string{"localhost:9000", "[::1]:9000"}, clickhouse.CompressionNone},
		{"auto", []string{"127.0.0.1:9000", "ch.example.com:9440"}, clickhouse.CompressionLZ4},
		{"auto", []string{"10.0.0.5:9000"}, clickhouse.CompressionLZ4},
		{"lz4", []string{"127.0.0.1:9000"}, clickhouse.CompressionLZ4},
		{"zstd", []string{"127.0.0.1:9000"}, clickhouse.CompressionZSTD},
		{"none", []string{"ch.example.com:9440"}, clickhouse.CompressionNone},
	}
	for _, tt := range tests {
		got, err := compression(tt.method, tt.addrs)
		if err != nil {
			t.Errorf("compression(%q, %v): %v", tt.method, tt.addrs, err)
			continue
		}
		if got.Method != tt.want {
			t.Errorf("compression(%q, %v) = %v, want %v", tt.method, tt.addrs, got.Method, tt.want)
		}
	}
	if _, err := compression("gzip", []string{"127.0.0.1:9000"}); err == nil {
		t.Errorf("compression(gzip) was accepted")
	}
}

// countingRelay forwards loopback connections to addr and counts the bytes
// clients send, so a test can see what travels on the wire.
type countingRelay struct {
	ln     net.Listener
	sent   atomic.Int64
	active atomic.Int64 // connections not yet closed by the client
}

func startCountingRelay(t *testing.T, addr string) *countingRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &countingRelay{ln: ln}
	var wg sync.WaitGroup
	var open sync.Map
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			open.Store(c, up)
			r.active.Add(1)
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
			go func() {
				defer wg.Done()
				n, _ := io.Copy(up, c)
				r.sent.Add(n)
				up.Close()
				r.active.Add(-1)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(k, v any) bool { k.(net.Conn).Close(); v.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return r
}

func TestLZ4SendsFewerBytesThanNoneForTheSameRows(t *testing.T) {
	srv := chtest.Shared(t)
	const rows = 50_000
	var batch pipeline.Batch
	for i := range rows {
		batch.Append(pipeline.Row{VariableID: fmt.Sprintf("var%03d", i%100), DeviceID: "dev", DeviceLabel: "truck", VariableLabel: "speed",
			TsMs: 1700000000000 + int64(i)*1000, Value: float64(i % 50), Context: `{"lat":1.5,"lng":2.5}`, Lat: 1.5, Lng: 2.5, HasLat: true, HasLng: true})
	}
	sent := map[string]int64{}
	for _, method := range []string{CompressionNone, CompressionLZ4, CompressionZSTD} {
		relay := startCountingRelay(t, srv.Addr())
		c := newTestClient(t, srv, func(cfg *Config) {
			cfg.Addr = []string{relay.ln.Addr().String()}
			cfg.Compression = method
		})
		if err := c.Write(context.Background(), []*pipeline.Batch{&batch}); err != nil {
			t.Fatalf("Write with compression %s: %v", method, err)
		}
		if got := len(readPoints(t, c)); got != rows {
			t.Fatalf("compression %s: read back %d rows, want %d", method, got, rows)
		}
		c.Close() // ends the relayed connections, so their counts are final
		deadline := time.Now().Add(30 * time.Second)
		for relay.active.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("compression %s: %d relayed connections still open 30s after Close", method, relay.active.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
		sent[method] = relay.sent.Load()
	}
	t.Logf("bytes sent for %d rows (migrate, write and read-back): none %d, lz4 %d, zstd %d", rows, sent[CompressionNone], sent[CompressionLZ4], sent[CompressionZSTD])
	for _, m := range []string{CompressionLZ4, CompressionZSTD} {
		if sent[m]*2 > sent[CompressionNone] {
			t.Errorf("compression %s sent %d bytes, not under half of none's %d: is it on the wire?", m, sent[m], sent[CompressionNone])
		}
	}
}
