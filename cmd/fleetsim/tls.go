package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
)

// serveTLS makes srv serve HTTPS with the certificate and key files, and
// returns the scheme it will serve: "https", or "http" when both are empty.
// The pair is loaded here, before listening, so a bad file ends the start
// with a message rather than failing every handshake later.
func serveTLS(srv *http.Server, certFile, keyFile string) (string, error) {
	if certFile == "" && keyFile == "" {
		return "http", nil
	}
	if certFile == "" || keyFile == "" {
		return "", errors.New("--tls-cert and --tls-key go together; give both, or neither for plain HTTP")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return "", fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return "https", nil
}
