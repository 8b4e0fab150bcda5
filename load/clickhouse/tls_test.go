package clickhouse

import (
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
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
