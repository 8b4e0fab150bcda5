package config

import (
	"strings"
)

// The values of clickhouse.compression.
const (
	// CompressionAuto is LZ4 to a remote server and none on loopback, where
	// compressing costs more CPU than the bytes it saves (perf-notes).
	CompressionAuto = "auto"
	CompressionLZ4  = "lz4"
	CompressionZSTD = "zstd"
	CompressionNone = "none"
)

// TLSConfig is clickhouse.tls: how the native protocol is secured.
type TLSConfig struct {
	// Enabled dials TLS; the server's certificate is verified against the
	// system's CAs plus CAFile.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// CAFile is a PEM file of CAs trusted beside the system's.
	CAFile string `yaml:"ca_file" json:"ca_file"`
	// CertFile and KeyFile are the client certificate and its key, for a
	// server that verifies its clients; both or neither.
	CertFile string `yaml:"cert_file" json:"cert_file"`
	KeyFile  string `yaml:"key_file" json:"key_file"`
	// ServerName is the name the server's certificate must carry; empty
	// means the host of the address dialled.
	ServerName string `yaml:"server_name" json:"server_name"`
	// InsecureSkipVerify accepts any server certificate (logged as a
	// warning at every start); for tests of a setup, never for production.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify" json:"insecure_skip_verify"`
}

// validateCompressionAndTLS adds the problems of clickhouse.compression and
// clickhouse.tls to p. Whether the files are readable is checked where they
// are read, when the client is opened.
func (c *ClickHouseConfig) validateCompressionAndTLS(p *problems) {
	switch c.Compression {
	case CompressionAuto, CompressionLZ4, CompressionZSTD, CompressionNone:
	default:
		p.addf("clickhouse.compression", "unknown method %q; use auto, lz4, zstd or none", c.Compression)
	}
	t := c.TLS
	if !t.Enabled {
		var set []string
		for _, f := range []struct {
			key string
			on  bool
		}{{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""}, {"server_name", t.ServerName != ""}, {"insecure_skip_verify", t.InsecureSkipVerify}} {
			if f.on {
				set = append(set, "clickhouse.tls."+f.key)
			}
		}
		if len(set) > 0 {
			p.addf("clickhouse.tls.enabled", "false, but %s is set and would be ignored; set clickhouse.tls.enabled: true, or remove %s", strings.Join(set, ", "), strings.Join(set, ", "))
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.addf("clickhouse.tls.cert_file", "cert_file and key_file go together (the client certificate and its key); set both or neither")
	}
	if t.InsecureSkipVerify && t.CAFile != "" {
		p.addf("clickhouse.tls.insecure_skip_verify", "true makes clickhouse.tls.ca_file useless (nothing is verified); remove one of them")
	}
	for _, f := range []struct{ key, val string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.val != "" && strings.TrimSpace(f.val) != f.val {
			p.addf("clickhouse.tls."+f.key, "%q has leading or trailing spaces; remove them", f.val)
		}
	}
	if t.ServerName != "" && strings.ContainsAny(t.ServerName, " /:") {
		p.addf("clickhouse.tls.server_name", "%q is not a host name; write the name in the server's certificate, e.g. abc123.eu-west-1.aws.clickhouse.cloud", t.ServerName)
	}
}

// validateCAFile adds a problem when source.ca_file is padded with spaces.
func (s *SourceConfig) validateCAFile(p *problems) {
	if s.CAFile != "" && strings.TrimSpace(s.CAFile) != s.CAFile {
		p.addf("source.ca_file", "%q has leading or trailing spaces; remove them", s.CAFile)
	}
}
