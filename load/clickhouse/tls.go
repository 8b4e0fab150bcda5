package clickhouse

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// The values of Config.Compression.
const (
	// CompressionAuto compresses with LZ4 when any address is remote and
	// sends plain blocks when every address is on loopback, where LZ4 costs
	// more CPU than the bytes it saves (docs/perf-notes).
	CompressionAuto = "auto"
	CompressionLZ4  = "lz4"
	CompressionZSTD = "zstd"
	CompressionNone = "none"
)

// compression resolves Config.Compression for the addresses dialled; an
// unknown method is a *ConfigError.
func compression(method string, addrs []string) (*clickhouse.Compression, error) {
	switch method {
	case "", CompressionAuto:
		for _, a := range addrs {
			if !isLoopback(a) {
				return &clickhouse.Compression{Method: clickhouse.CompressionLZ4}, nil
			}
		}
		return &clickhouse.Compression{Method: clickhouse.CompressionNone}, nil
	case CompressionLZ4:
		return &clickhouse.Compression{Method: clickhouse.CompressionLZ4}, nil
	case CompressionZSTD:
		return &clickhouse.Compression{Method: clickhouse.CompressionZSTD}, nil
	case CompressionNone:
		return &clickhouse.Compression{Method: clickhouse.CompressionNone}, nil
	}
	return nil, &ConfigError{Field: "compression", Reason: fmt.Sprintf("unknown method %q; use auto, lz4, zstd or none", method)}
}

// isLoopback reports whether addr ("host:port") names this machine by a
// loopback IP or "localhost"; any other name counts as remote.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// TLSError is a TLS handshake with the server that failed for a reason
// retrying cannot cure: its certificate is not trusted or names another
// host, it does not speak TLS on that port, or it refused our client
// certificate. The fix is in clickhouse.tls (or clickhouse.addr), so the
// error says which, on one line.
type TLSError struct {
	Addr []string
	Err  error
	fix  string
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("clickhouse.tls: TLS handshake with %s failed: %s; %s", strings.Join(e.Addr, ","), oneLine(e.Err), e.fix)
}

func (e *TLSError) Unwrap() error { return e.Err }

// oneLine flattens an error's text, which may come from a server, so the
// message stays on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// certFix is the fix for a server that wants a client certificate.
const certFix = "the server asks for a client certificate and refused the connection without one; set clickhouse.tls.cert_file and key_file to a certificate its CA signed"

// tlsFailure returns err as a *TLSError when it is a TLS handshake failure
// that will not go away by retrying, else nil. tlsOn says whether the
// client dialled TLS at all; certAsked that a server asked for a client
// certificate we did not have. The decision is made on types: x509 and tls
// error types, the net.OpError the tls package gives for an alert the
// server sent, and (when certAsked) the connection closing, which is how
// a TLS 1.3 server's rejection often arrives: its alert comes after our
// handshake has finished, and our first write can meet the reset before
// our first read meets the alert.
func tlsFailure(err error, addrs []string, tlsOn, certAsked bool) *TLSError {
	if err == nil || !tlsOn {
		return nil
	}
	var te *TLSError
	if errors.As(err, &te) {
		return te
	}
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
		rerr tls.RecordHeaderError
		oerr *net.OpError
	)
	switch {
	case errors.As(err, &herr):
		return &TLSError{Addr: addrs, Err: err, fix: "set clickhouse.tls.server_name to a name in the server's certificate, or use that name in clickhouse.addr"}
	case errors.As(err, &uerr), errors.As(err, &cerr), errors.As(err, &verr):
		return &TLSError{Addr: addrs, Err: err, fix: "set clickhouse.tls.ca_file to the CA that signed the server's certificate (or leave it empty for a publicly trusted one)"}
	case errors.As(err, &rerr):
		return &TLSError{Addr: addrs, Err: errors.New("the server did not answer in TLS"), fix: "point clickhouse.addr at the server's secure port (tcp_port_secure, 9440 on ClickHouse Cloud), or set clickhouse.tls.enabled: false for a plain port"}
	case errors.As(err, &oerr) && oerr.Op == "remote error" && certAsked:
		return &TLSError{Addr: addrs, Err: err, fix: certFix}
	case errors.As(err, &oerr) && oerr.Op == "remote error":
		return &TLSError{Addr: addrs, Err: err, fix: "the server refused the handshake; if it verifies clients, set clickhouse.tls.cert_file and key_file to a certificate its CA signed"}
	case certAsked && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		return &TLSError{Addr: addrs, Err: err, fix: certFix}
	}
	return nil
}

// noteCertRequests returns tc set to record, in asked, that a server asked
// for a client certificate when tc has none to give. It still answers with
// no certificate, which a server that only asks (verificationMode relaxed)
// accepts; one that requires it closes the connection, and asked turns
// that into a message naming the fix.
func noteCertRequests(tc *tls.Config, asked *atomic.Bool) *tls.Config {
	if tc == nil || len(tc.Certificates) > 0 || tc.GetClientCertificate != nil {
		return tc
	}
	tc = tc.Clone()
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked.Store(true)
		return &tls.Certificate{}, nil
	}
	return tc
}
