package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDashboardFleetPanelsRunOnClickHouse1816 creates fleetsync's tables
// with `fleetsync migrate` (the schema code itself, not a copy) in a
// throwaway Debian ClickHouse 18.16, puts a few rows in the analyst tables,
// and runs every fleet panel's SQL there: each must run and return rows.
func TestDashboardFleetPanelsRunOnClickHouse1816(t *testing.T) {
	snippet := string(mustRead(t, usersSnippetPath))
	sum := sha256.Sum256([]byte("unused-password"))
	srv := startClickHouse(t, strings.Replace(snippet, usersSnippetPlaceholder, hex.EncodeToString(sum[:]), 1))

	cfg := filepath.Join(t.TempDir(), "fleetsync.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`source:
  base_url: http://127.0.0.1:9
  token: unused
clickhouse:
  addr: ["127.0.0.1:%d"]
  database: fleet
`, srv.port)), 0o600); err != nil {
		t.Fatal(err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go: %v", err)
	}
	migrate := exec.Command(gobin, "run", "./cmd/fleetsync", "migrate", "--config", cfg)
	migrate.Dir = ".."
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("fleetsync migrate: %v\n%s", err, out)
	}
	for _, q := range []string{
		"INSERT INTO fleet.datapoints_latest (variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng, version) VALUES " +
			"('v1', 'd1', 'truck-1', 'temperature', 1700000000000, toDateTime(1700000000), 21.5, '{}', NULL, NULL, 1), " +
			"('v2', 'd1', 'truck-1', 'position', 1700000000000, toDateTime(1700000000), 4, '{\"lat\":47.1,\"lng\":11.2}', 47.1, 11.2, 1)",
		"INSERT INTO fleet.datapoints_hourly (variable_id, device_id, hour, count, sum, min, max, first_value, last_value, first_ts_ms, last_ts_ms, version) VALUES " +
			"('v1', 'd1', toStartOfHour(now()), 2, 43, 21.5, 21.5, 21.5, 21.5, 1, 2, 1)",
	} {
		if out, err := srv.query("default", "", q); err != nil {
			t.Fatalf("%s: %v\n%s", q, err, out)
		}
	}
	n := 0
	for _, p := range readDashboard(t).Panels {
		if !p.sql() {
			continue
		}
		for _, tg := range p.Targets {
			n++
			q := strings.ReplaceAll(tg.Query, "$database", "fleet")
			out, err := srv.query("default", "", q)
			if err != nil {
				t.Errorf("panel %d (%s) target %s does not run on ClickHouse 18.16: %v\n%s\n%s", p.ID, p.Title, tg.RefID, err, q, out)
				continue
			}
			if strings.TrimSpace(out) == "" {
				t.Errorf("panel %d (%s) target %s returned no rows from tables that hold some:\n%s", p.ID, p.Title, tg.RefID, q)
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard has no fleet panel")
	}
}
