package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestRetryableDecidesByTypeAndCode(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("insert into x: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"too many parts", wrap(&clickhouse.Exception{Code: 252, Message: "Too many parts"}), true},
		{"memory limit", &clickhouse.Exception{Code: 241}, true},
		{"timeout exceeded", &clickhouse.Exception{Code: 159}, true},
		{"network error", &clickhouse.Exception{Code: 210}, true},
		{"a replica died mid-read", wrap(&clickhouse.Exception{Code: 32, Message: "Attempt to read after eof: while receiving packet from 127.0.0.1:41151"}), true},
		{"every replica stale", &clickhouse.Exception{Code: 369, Message: "Could not find enough connections to up-to-date replicas. Got: 0, needed: 1"}, true},
		{"unknown table", wrap(&clickhouse.Exception{Code: 60}), false},
		{"no such column", &clickhouse.Exception{Code: 16}, false},
		{"syntax error", &clickhouse.Exception{Code: 62}, false},
		{"wrong password", &clickhouse.Exception{Code: 516}, false},
		{"EOF", wrap(io.EOF), true},
		{"unexpected EOF", wrap(io.ErrUnexpectedEOF), true},
		{"refused", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), true},
		{"reset", wrap(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), true},
		{"broken pipe", wrap(syscall.EPIPE), true},
		{"i/o timeout", wrap(&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}), true},
		{"pool exhausted", wrap(clickhouse.ErrAcquireConnTimeout), true},
		{"host not found", wrap(&net.DNSError{Err: "no such host", Name: "nope", IsNotFound: true}), false},
		{"resolver timeout", wrap(&net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}), true},
		{"attempt deadline", wrap(context.DeadlineExceeded), true},
		{"cancelled", wrap(context.Canceled), false},
		{"conversion", errors.New("clickhouse [AppendRow]: converting string to Int64 is unsupported"), false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
