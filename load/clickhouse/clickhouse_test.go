package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver"
	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.StopShared()
	chtest.StopCluster()
	os.Exit(code)
}

// newTestClient opens a migrated client on a fresh database of srv.
func newTestClient(t testing.TB, srv *chserver.Server, tweak func(*Config)) *Client {
	t.Helper()
	cfg := Config{Addr: []string{srv.Addr()}, Database: chtest.NewDatabase(t, srv), MaxElapsed: 20 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := Open(context.Background(), cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Schema().Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return c
}

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func showCreate(t *testing.T, c *Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, td := range schema {
		if td.clusterOnly {
			continue // placement tables: a cluster's alone
		}
		var ddl string
		if err := c.Conn().QueryRow(context.Background(), "SHOW CREATE TABLE "+c.Table(td.name)).Scan(&ddl); err != nil {
			t.Fatalf("SHOW CREATE TABLE %s: %v", td.name, err)
		}
		out[td.name] = ddl
	}
	var n uint64
	if err := c.Conn().QueryRow(context.Background(), "SELECT count() FROM "+c.Table(TableSchemaMigrations)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	out["schema_migrations rows"] = fmt.Sprint(n)
	return out
}

func TestMigrateTwiceChangesNothing(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), func(c *Config) { c.TablePrefix = "fs_" })
	before := showCreate(t, c)
	if err := c.Schema().Migrate(context.Background()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	after := showCreate(t, c)
	for name, b := range before {
		if after[name] != b {
			t.Errorf("%s changed by the second Migrate:\nbefore: %s\nafter:  %s", name, b, after[name])
		}
	}
	if before["schema_migrations rows"] != "1" {
		t.Errorf("schema_migrations holds %s rows, want 1", before["schema_migrations rows"])
	}
	if !strings.Contains(before[TableDatapoints], "`"+c.Database()+"`.`fs_datapoints`") && !strings.Contains(before[TableDatapoints], c.Database()+".fs_datapoints") {
		t.Errorf("datapoints table not created under the prefix: %s", before[TableDatapoints])
	}
	v, err := c.Schema().AppliedSchemaVersion(context.Background())
	if err != nil || v != SchemaVersion {
		t.Errorf("AppliedSchemaVersion = %d, %v; want %d", v, err, SchemaVersion)
	}
}

func TestMigrateAddsColumnsAnOlderTableLacks(t *testing.T) {
	srv := chtest.Shared(t)
	db := chtest.NewDatabase(t, srv)
	c, err := Open(context.Background(), Config{Addr: []string{srv.Addr()}, Database: db}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// The variables table as an earlier schema had it: no color, no device_label.
	old := "CREATE TABLE " + c.Table(TableVariables) + " (id String, device_id String, label String, name String, properties String, " +
		"created_at DateTime('UTC'), last_activity_ms Int64, deleted UInt8, synced_at DateTime('UTC'), version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY id"
	if err := c.Conn().Exec(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := c.Schema().Migrate(ctx); err != nil {
		t.Fatalf("Migrate over the old table: %v", err)
	}
	have, err := c.Schema().columnTypesOf(ctx, TableVariables)
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"color", "device_label"} {
		if have[col] != "String" {
			t.Errorf("after Migrate column %s has type %q, want String", col, have[col])
		}
	}
	if err := c.Metadata().WriteVariables(ctx, []pipeline.Variable{{ID: "v1", DeviceID: "d1", Label: "t"}}, time.Now()); err != nil {
		t.Errorf("WriteVariables into the upgraded table: %v", err)
	}
}

func TestOpenRejectsNamesThatAreNotIdentifiers(t *testing.T) {
	for _, tc := range []struct{ db, prefix string }{
		{"fleet-prod", ""}, {"1fleet", ""}, {"fl`eet", ""}, {"", ""}, {"fleet", "bad prefix"}, {"fleet", "x;DROP"},
	} {
		_, err := Open(context.Background(), Config{Addr: []string{"127.0.0.1:1"}, Database: tc.db, TablePrefix: tc.prefix, Password: "s3cret"}, nil, nil)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("Open(database %q, prefix %q) = %v, want a *ConfigError", tc.db, tc.prefix, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("config error reveals the password: %v", err)
		}
	}
	if _, err := Open(context.Background(), Config{Addr: []string{"127.0.0.1:1"}, Database: "fleet_1", TablePrefix: "_x"}, nil, nil); err != nil {
		t.Errorf("Open with valid names: %v", err)
	}
	if s := (Config{Password: "s3cret"}).String(); strings.Contains(s, "s3cret") {
		t.Errorf("Config.String reveals the password: %s", s)
	}
}

type pointRow struct {
	VariableID, DeviceID, DeviceLabel, VariableLabel string
	TsMs                                             int64
	Ts                                               time.Time
	Value                                            float64
	Context                                          string
	Lat, Lng                                         *float64
}

func readPoints(t *testing.T, c *Client) []pointRow {
	t.Helper()
	rows, err := c.Conn().Query(context.Background(), "SELECT variable_id, device_id, device_label, variable_label, ts_ms, ts, value, context, lat, lng FROM "+
		c.Table(TableDatapoints)+" FINAL ORDER BY variable_id, ts_ms")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []pointRow
	for rows.Next() {
		var r pointRow
		if err := rows.Scan(&r.VariableID, &r.DeviceID, &r.DeviceLabel, &r.VariableLabel, &r.TsMs, &r.Ts, &r.Value, &r.Context, &r.Lat, &r.Lng); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func f(v float64) *float64 { return &v }

func fmtPtr(p *float64) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

func TestWriteStoresExactValuesIncludingNullLatLng(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	var a, b pipeline.Batch
	a.Append(pipeline.Row{VariableID: "v1", DeviceID: "d1", DeviceLabel: "truck-1", VariableLabel: "speed", TsMs: 1700000000123, Value: 42.5,
		Context: `{"lat":1.25,"lng":-2.5}`, Lat: 1.25, Lng: -2.5, HasLat: true, HasLng: true})
	a.Append(pipeline.Row{VariableID: "v1", DeviceID: "d1", DeviceLabel: "truck-1", VariableLabel: "speed", TsMs: 1700000000999, Value: -0.000001,
		Context: `{}`})
	b.Append(pipeline.Row{VariableID: "v2", DeviceID: "d1", DeviceLabel: "truck-1", VariableLabel: "pos", TsMs: 1, Value: math.MaxFloat64,
		Context: `{"lat":"n/a","lng":3}`, Lng: 3, HasLng: true})
	if err := c.Write(context.Background(), []*pipeline.Batch{&a, &b}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	want := []pointRow{
		{"v1", "d1", "truck-1", "speed", 1700000000123, time.Unix(1700000000, 0), 42.5, `{"lat":1.25,"lng":-2.5}`, f(1.25), f(-2.5)},
		{"v1", "d1", "truck-1", "speed", 1700000000999, time.Unix(1700000000, 0), -0.000001, `{}`, nil, nil},
		{"v2", "d1", "truck-1", "pos", 1, time.Unix(0, 0), math.MaxFloat64, `{"lat":"n/a","lng":3}`, nil, f(3)},
	}
	got := readPoints(t, c)
	if len(got) != len(want) {
		t.Fatalf("read back %d rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.VariableID != w.VariableID || g.DeviceID != w.DeviceID || g.DeviceLabel != w.DeviceLabel || g.VariableLabel != w.VariableLabel ||
			g.TsMs != w.TsMs || !g.Ts.Equal(w.Ts) || g.Value != w.Value || g.Context != w.Context ||
			fmtPtr(g.Lat) != fmtPtr(w.Lat) || fmtPtr(g.Lng) != fmtPtr(w.Lng) {
			t.Errorf("row %d:\n got  %+v lat=%s lng=%s\n want %+v lat=%s lng=%s", i, g, fmtPtr(g.Lat), fmtPtr(g.Lng), w, fmtPtr(w.Lat), fmtPtr(w.Lng))
		}
	}
	if n := counterValue(t, c.metrics.rows.WithLabelValues(TableDatapoints)); n != 3 {
		t.Errorf("fleetsync_rows_inserted_total{table=datapoints} = %v, want 3", n)
	}
}

func TestRewriteOfSamePointLeavesOneRowWithNewValueUnderFinal(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	for _, v := range []float64{1, 2, 3} {
		var b pipeline.Batch
		b.Append(pipeline.Row{VariableID: "v1", DeviceID: "d", TsMs: 1700000000000, Value: v, Context: "{}"})
		if err := c.Write(ctx, []*pipeline.Batch{&b}); err != nil {
			t.Fatalf("Write value %v: %v", v, err)
		}
	}
	got := readPoints(t, c)
	if len(got) != 1 || got[0].Value != 3 {
		t.Fatalf("under FINAL got %+v, want one row with value 3", got)
	}
	var raw uint64
	if err := c.Conn().QueryRow(ctx, "SELECT count() FROM "+c.Table(TableDatapoints)).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if raw < 1 {
		t.Errorf("raw row count %d", raw)
	}
}

func TestWriteRejectsMalformedBatchWithoutContactingServer(t *testing.T) {
	c, err := Open(context.Background(), Config{Addr: []string{"127.0.0.1:1"}, Database: "x"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := &pipeline.Batch{TsMs: []int64{1, 2}, VariableID: []string{"a"}}
	err = c.Write(context.Background(), []*pipeline.Batch{b})
	if err == nil || Retryable(err) {
		t.Fatalf("Write of a malformed batch = %v, want a permanent error", err)
	}
}

func TestWriteIntoTableMissingAColumnFailsPermanentlyWithoutRetry(t *testing.T) {
	srv := chtest.Shared(t)
	db := chtest.NewDatabase(t, srv)
	c, err := Open(context.Background(), Config{Addr: []string{srv.Addr()}, Database: db, MaxElapsed: time.Minute}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Conn().Exec(ctx, "CREATE TABLE "+c.Table(TableDatapoints)+" (variable_id String, ts_ms Int64) ENGINE = MergeTree ORDER BY ts_ms"); err != nil {
		t.Fatal(err)
	}
	var b pipeline.Batch
	b.Append(pipeline.Row{VariableID: "v", TsMs: 1, Context: "{}"})
	start := time.Now()
	err = c.Write(ctx, []*pipeline.Batch{&b})
	if err == nil {
		t.Fatal("Write into a table without the columns succeeded")
	}
	if Retryable(err) {
		t.Errorf("error classified retryable: %v", err)
	}
	if !strings.Contains(err.Error(), TableDatapoints) {
		t.Errorf("error does not name the table: %v", err)
	}
	if r := counterValue(t, c.metrics.retries.WithLabelValues(TableDatapoints)); r != 0 || time.Since(start) > 10*time.Second {
		t.Errorf("permanent error was retried: %v retries in %s", r, time.Since(start))
	}
}

func TestWriteRetriesUntilKilledServerIsResumed(t *testing.T) {
	ctx := context.Background()
	srv := chtest.Start(t, chserver.Options{})
	c := newTestClient(t, srv, func(c *Config) { c.MaxElapsed = 2 * time.Minute; c.DialTimeout = 2 * time.Second })
	var b pipeline.Batch
	for i := range 1000 {
		b.Append(pipeline.Row{VariableID: "v", DeviceID: "d", TsMs: int64(i), Value: float64(i), Context: "{}"})
	}
	// Warm the pool so the write meets a dead pooled connection, the
	// harder case, rather than only a refused dial.
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Write(ctx, []*pipeline.Batch{&b}) }()

	retries := c.metrics.retries.WithLabelValues(TableDatapoints)
	deadline := time.Now().Add(30 * time.Second)
	for counterValue(t, retries) < 2 {
		select {
		case err := <-done:
			t.Fatalf("Write returned %v while the server was down", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("Write did not retry within 30s of the server going down")
		}
	}
	if err := srv.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Write after Resume: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("Write did not finish within 90s of the server coming back")
	}
	var n uint64
	if err := c.Conn().QueryRow(ctx, "SELECT count() FROM "+c.Table(TableDatapoints)+" FINAL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1000 {
		t.Errorf("after retried Write: %d rows under FINAL, want 1000", n)
	}
}

func TestWriteStopsRetryingWhenContextEnds(t *testing.T) {
	c, err := Open(context.Background(), Config{Addr: []string{"127.0.0.1:1"}, Database: "x", MaxElapsed: time.Hour, DialTimeout: time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var b pipeline.Batch
	b.Append(pipeline.Row{VariableID: "v", Context: "{}"})
	start := time.Now()
	err = c.Write(ctx, []*pipeline.Batch{&b})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Write with an expiring context = %v, want it to wrap context.DeadlineExceeded", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("Write took %s to notice its context ended", time.Since(start))
	}
}

func TestWriteDevicesVariablesAndMarkDeleted(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	created := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	devs := []pipeline.Device{
		{ID: "d1", Label: "truck-1", Name: "Truck 1", Properties: json.RawMessage(`{"a":1}`), Tags: []string{"x", "y"}, CreatedAt: created, LastActivityMs: 5, Organization: "o1"},
		{ID: "d2", Label: "truck-2"},
		{ID: `d'q\\`, Label: "quoted"},
	}
	if err := c.Metadata().WriteDevices(ctx, devs, created); err != nil {
		t.Fatalf("WriteDevices: %v", err)
	}
	vars := []pipeline.Variable{{ID: "v1", DeviceID: "d1", DeviceLabel: "truck-1", Label: "speed", Properties: json.RawMessage(`{"_color":"#ff0000"}`), CreatedAt: created}}
	if err := c.Metadata().WriteVariables(ctx, vars, created); err != nil {
		t.Fatalf("WriteVariables: %v", err)
	}
	if err := c.Metadata().MarkDeleted(ctx, TableDevices, []string{"d2", "unknown", `d'q\\`}); err != nil {
		t.Fatalf("MarkDeleted: %v", err)
	}
	if err := c.Metadata().MarkDeleted(ctx, "datapoints", []string{"x"}); err == nil {
		t.Error("MarkDeleted on datapoints succeeded, want an error")
	}

	type devRow struct {
		ID, Label, Props, Org string
		Tags                  []string
		Created               time.Time
		Deleted               uint8
	}
	rows, err := c.Conn().Query(ctx, "SELECT id, label, properties, organization_id, tags, created_at, deleted FROM "+c.Table(TableDevices)+" FINAL ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var got []devRow
	for rows.Next() {
		var r devRow
		if err := rows.Scan(&r.ID, &r.Label, &r.Props, &r.Org, &r.Tags, &r.Created, &r.Deleted); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	rows.Close()
	want := []devRow{
		{`d'q\\`, "quoted", `{}`, "", []string{}, time.Unix(0, 0), 1},
		{"d1", "truck-1", `{"a":1}`, "o1", []string{"x", "y"}, created, 0},
		{"d2", "truck-2", `{}`, "", []string{}, time.Unix(0, 0), 1},
	}
	if len(got) != len(want) {
		t.Fatalf("devices FINAL = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Label != w.Label || g.Props != w.Props || g.Org != w.Org || !reflect.DeepEqual(g.Tags, w.Tags) || !g.Created.Equal(w.Created) || g.Deleted != w.Deleted {
			t.Errorf("device %d: got %+v, want %+v", i, g, w)
		}
	}
	var color, devLabel string
	if err := c.Conn().QueryRow(ctx, "SELECT color, device_label FROM "+c.Table(TableVariables)+" FINAL WHERE id = 'v1'").Scan(&color, &devLabel); err != nil {
		t.Fatal(err)
	}
	if color != "#ff0000" || devLabel != "truck-1" {
		t.Errorf("variable v1 color %q device_label %q, want #ff0000 truck-1", color, devLabel)
	}
}

func TestPointStatsCountsDeduplicatedPointsInsideTheRange(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	ctx := context.Background()
	var b pipeline.Batch
	for _, ts := range []int64{999, 1000, 1500, 2000, 2001} {
		b.Append(pipeline.Row{VariableID: "a", TsMs: ts, Value: 1, Context: "{}"})
	}
	b.Append(pipeline.Row{VariableID: "b", TsMs: 1999, Value: 2.5, Context: "{}"})
	for range 2 { // the second write duplicates every row
		if err := c.Write(ctx, []*pipeline.Batch{&b}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Readback().PointStats(ctx, 1000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Stats{"a": {Count: 3, Sum: 3, MinTs: 1000, MaxTs: 2000}, "b": {Count: 1, Sum: 2.5, MinTs: 1999, MaxTs: 1999}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PointStats(1000, 2000) = %+v, want %+v", got, want)
	}
}

// BenchmarkWrite measures columnar inserts of 100k-row batches into the
// shared test server; it reports rows/s.
func BenchmarkWrite(b *testing.B) {
	c := newTestClient(b, chtest.Shared(b), nil)
	const rows = 100_000
	var batch pipeline.Batch
	base := time.Now().UnixMilli()
	for i := range rows {
		batch.Append(pipeline.Row{VariableID: fmt.Sprintf("var%03d", i%100), DeviceID: "dev", DeviceLabel: "truck", VariableLabel: "speed",
			TsMs: base - int64(i)*1000, Value: float64(i) * 0.5, Context: `{"lat":1.5,"lng":2.5}`, Lat: 1.5, Lng: 2.5, HasLat: true, HasLng: i%2 == 0})
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Write(ctx, []*pipeline.Batch{&batch}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

func TestConcurrentMigratesBothSucceed(t *testing.T) {
	srv := chtest.Shared(t)
	db := chtest.NewDatabase(t, srv)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			c, err := Open(context.Background(), Config{Addr: []string{srv.Addr()}, Database: db}, nil, nil)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			errs <- c.Schema().Migrate(context.Background())
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
}
