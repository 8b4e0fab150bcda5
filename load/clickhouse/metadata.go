package clickhouse

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// WriteDevices stores the snapshot of devices (deleted = 0) with synced_at,
// replacing earlier snapshots of the same ids.
func (c *Client) WriteDevices(ctx context.Context, devices []pipeline.Device, syncedAt time.Time) error {
	if len(devices) == 0 {
		return nil
	}
	version := c.NextVersion()
	synced := clampTime(syncedAt)
	query := "INSERT INTO " + c.Table(TableDevices) +
		" (id, label, name, description, url, properties, tags, organization_id, created_at, last_activity_ms, deleted, synced_at, version)"
	err := c.Retry(ctx, TableDevices, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, query)
		if err != nil {
			return err
		}
		defer b.Abort()
		for _, d := range devices {
			tags := d.Tags
			if tags == nil {
				tags = []string{}
			}
			if err := b.Append(d.ID, d.Label, d.Name, d.Description, d.URL, jsonText(d.Properties), tags,
				d.Organization, clampTime(d.CreatedAt), d.LastActivityMs, uint8(0), synced, version); err != nil {
				return fmt.Errorf("device %s: %w", d.ID, err)
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("insert %d devices into %s: %w", len(devices), c.Table(TableDevices), err)
	}
	c.metrics.rows.WithLabelValues(TableDevices).Add(float64(len(devices)))
	return nil
}

// WriteVariables stores the snapshot of variables (deleted = 0) with
// synced_at, replacing earlier snapshots of the same ids. color is the
// `_color` key of the variable's properties, the display colour.
func (c *Client) WriteVariables(ctx context.Context, vars []pipeline.Variable, syncedAt time.Time) error {
	if len(vars) == 0 {
		return nil
	}
	version := c.NextVersion()
	synced := clampTime(syncedAt)
	query := "INSERT INTO " + c.Table(TableVariables) +
		" (id, device_id, device_label, label, name, properties, color, created_at, last_activity_ms, deleted, synced_at, version)"
	err := c.Retry(ctx, TableVariables, func(ctx context.Context) error {
		b, err := c.conn.PrepareBatch(ctx, query)
		if err != nil {
			return err
		}
		defer b.Abort()
		for _, v := range vars {
			if err := b.Append(v.ID, v.DeviceID, v.DeviceLabel, v.Label, v.Name, jsonText(v.Properties), colorOf(v.Properties),
				clampTime(v.CreatedAt), v.LastActivityMs, uint8(0), synced, version); err != nil {
				return fmt.Errorf("variable %s: %w", v.ID, err)
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("insert %d variables into %s: %w", len(vars), c.Table(TableVariables), err)
	}
	c.metrics.rows.WithLabelValues(TableVariables).Add(float64(len(vars)))
	return nil
}

// MarkDeleted flags the objects ids of table (TableDevices or
// TableVariables) as deleted = 1 by inserting a newer copy of each current
// row; rows already flagged or unknown ids are left alone. The server copies
// the rows itself (INSERT ... SELECT), so nothing travels back and forth.
func (c *Client) MarkDeleted(ctx context.Context, table string, ids []string) error {
	var cols string
	switch table {
	case TableDevices:
		cols = "id, label, name, description, url, properties, tags, organization_id, created_at, last_activity_ms"
	case TableVariables:
		cols = "id, device_id, device_label, label, name, properties, color, created_at, last_activity_ms"
	default:
		return fmt.Errorf("mark deleted: table %q has no deleted flag; want %s or %s", table, TableDevices, TableVariables)
	}
	const perStatement = 1000
	for start := 0; start < len(ids); start += perStatement {
		part := ids[start:min(start+perStatement, len(ids))]
		version := c.NextVersion()
		now := time.Now().Unix()
		query := fmt.Sprintf("INSERT INTO %s (%s, deleted, synced_at, version) SELECT %s, 1, toDateTime(%d, 'UTC'), toUInt64(%d) FROM %s FINAL WHERE has(?, id) AND deleted = 0",
			c.Table(table), cols, cols, now, version, c.Table(table))
		err := c.Retry(ctx, table, func(ctx context.Context) error {
			return c.conn.Exec(ctx, query, part)
		})
		if err != nil {
			return fmt.Errorf("mark %d ids deleted in %s: %w", len(part), c.Table(table), err)
		}
	}
	return nil
}

// jsonText is a properties object as stored: "{}" when the source gave none.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	return string(raw)
}

// colorOf returns properties._color when it is a string, else "".
func colorOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var p struct {
		Color any `json:"_color"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return ""
	}
	s, _ := p.Color.(string)
	return s
}

// clampTime keeps t inside DateTime's range (1970 to 2106), so a zero
// time.Time stores as the epoch instead of wrapping around.
func clampTime(t time.Time) time.Time {
	switch s := t.Unix(); {
	case s < 0:
		return time.Unix(0, 0).UTC()
	case s > 1<<32-1:
		return time.Unix(1<<32-1, 0).UTC()
	}
	return t.UTC()
}

// The devices and variables tables are written change by change: a
// cycle compares each walked object with its stored row through a
// fingerprint of the row's content (every column but id, deleted,
// synced_at and version), computed by the server from the stored row and
// by fleetsync from the row it would write, and writes only the objects
// whose live row is missing or differs. The fingerprint is read from the
// table itself, once per cycle, as (id, 8 bytes) a row: whatever put the
// table in its state (a crash between two INSERTs, a hand-made change, a
// second writer) is seen, so the comparison is exact without anything
// kept beside the table. synced_at is therefore when the row was last
// written, i.e. since when the source has shown the object as it is.

// metadataInsertRows bounds the rows of one INSERT of devices or
// variables, so that the driver's column buffers stay small however large
// the fleet.
const metadataInsertRows = 50000

// fpString is the fingerprint encoding of a String column: its length in
// bytes, a colon and the bytes, so that no two sequences of values encode
// alike.
func fpString(col string) string { return "toString(length(" + col + ")), ':', " + col }

// fpSQL is the server's fingerprint of a row: the first 8 bytes of the MD5
// of its encoded columns, little-endian, as fingerprint computes it.
func fpSQL(parts ...string) string {
	return "reinterpretAsUInt64(MD5(concat(" + strings.Join(parts, ", ") + ")))"
}

var (
	deviceFingerprintSQL = fpSQL(fpString("label"), fpString("name"), fpString("description"), fpString("url"), fpString("properties"),
		"toString(length(tags)), ':', arrayStringConcat(arrayMap(t -> concat(toString(length(t)), ':', t), tags))",
		fpString("organization_id"), "toString(toUInt32(created_at)), ';'", "toString(last_activity_ms), ';'")
	variableFingerprintSQL = fpSQL(fpString("device_id"), fpString("device_label"), fpString("label"), fpString("name"), fpString("properties"),
		fpString("color"), "toString(toUInt32(created_at)), ';'", "toString(last_activity_ms), ';'")
)

// fingerprint computes what fpSQL computes, value by value.
type fingerprint struct {
	buf []byte
}

func (f *fingerprint) str(s string) {
	f.buf = strconv.AppendInt(f.buf, int64(len(s)), 10)
	f.buf = append(f.buf, ':')
	f.buf = append(f.buf, s...)
}

func (f *fingerprint) strs(list []string) {
	f.buf = strconv.AppendInt(f.buf, int64(len(list)), 10)
	f.buf = append(f.buf, ':')
	for _, s := range list {
		f.str(s)
	}
}

func (f *fingerprint) int(n int64) {
	f.buf = strconv.AppendInt(f.buf, n, 10)
	f.buf = append(f.buf, ';')
}

func (f *fingerprint) sum() uint64 {
	s := md5.Sum(f.buf)
	f.buf = f.buf[:0]
	return binary.LittleEndian.Uint64(s[:8])
}

// device is the fingerprint of the row WriteDevices writes for d.
func (f *fingerprint) device(d pipeline.Device) uint64 {
	f.str(d.Label)
	f.str(d.Name)
	f.str(d.Description)
	f.str(d.URL)
	f.str(jsonText(d.Properties))
	f.strs(d.Tags)
	f.str(d.Organization)
	f.int(clampTime(d.CreatedAt).Unix())
	f.int(d.LastActivityMs)
	return f.sum()
}

// variable is the fingerprint of the row WriteVariables writes for v.
func (f *fingerprint) variable(v pipeline.Variable) uint64 {
	f.str(v.DeviceID)
	f.str(v.DeviceLabel)
	f.str(v.Label)
	f.str(v.Name)
	f.str(jsonText(v.Properties))
	f.str(colorOf(v.Properties))
	f.int(clampTime(v.CreatedAt).Unix())
	f.int(v.LastActivityMs)
	return f.sum()
}

// walkIndex finds a walked object by id in a sorted array of 16 bytes an
// object (a hash of the id and the object's position), rather than a map
// of the ids: an account of 10^6 variables costs 16 MB here.
type walkIndex struct {
	seed    maphash.Seed
	entries []walkEntry
}

type walkEntry struct {
	key uint64
	i   int
}

func newWalkIndex(n int, id func(i int) string) *walkIndex {
	x := &walkIndex{seed: maphash.MakeSeed(), entries: make([]walkEntry, n)}
	for i := range n {
		x.entries[i] = walkEntry{maphash.String(x.seed, id(i)), i}
	}
	slices.SortFunc(x.entries, func(a, b walkEntry) int { return cmp.Compare(a.key, b.key) })
	return x
}

// find calls fn with the position of every walked object whose id hashes
// like id; fn checks the id itself, so a collision costs a comparison,
// never a wrong match.
func (x *walkIndex) find(id string, fn func(i int)) {
	k := maphash.String(x.seed, id)
	j, _ := slices.BinarySearchFunc(x.entries, k, func(e walkEntry, k uint64) int { return cmp.Compare(e.key, k) })
	for ; j < len(x.entries) && x.entries[j].key == k; j++ {
		fn(x.entries[j].i)
	}
}

// writeChanged is WriteChangedDevices and WriteChangedVariables over
// table: n walked objects, id(i) and fp(i) of each, and write(idx) storing
// the objects at the positions idx. It reads the live rows' fingerprints
// once, as a stream, and keeps a byte an object besides the index.
func (c *Client) writeChanged(ctx context.Context, table, fpExpr, deviceCol string, n int, id func(i int) string, fp func(i int) uint64,
	write func(ctx context.Context, idx []int) error) (pipeline.MetadataDiff, error) {
	var diff pipeline.MetadataDiff
	x := newWalkIndex(n, id)
	same := make([]bool, n)
	query := "SELECT id, " + deviceCol + ", " + fpExpr + " FROM " + c.Table(table) + " FINAL WHERE deleted = 0"
	err := func() error {
		rows, err := c.conn.Query(ctx, query)
		if err != nil {
			return err
		}
		defer rows.Close()
		var sid, dev string
		var sfp uint64
		for rows.Next() {
			if err := rows.Scan(&sid, &dev, &sfp); err != nil {
				return err
			}
			found := false
			x.find(sid, func(i int) {
				if id(i) == sid {
					found = true
					same[i] = fp(i) == sfp
				}
			})
			if !found {
				diff.Missing = append(diff.Missing, pipeline.StoredRef{ID: sid, DeviceID: dev})
			}
		}
		return rows.Err()
	}()
	if err != nil {
		return diff, fmt.Errorf("read the fingerprints of %s: %w", c.Table(table), err)
	}
	x = nil
	var idx []int
	for i := range n {
		if same[i] {
			continue
		}
		idx = append(idx, i)
		if len(idx) == metadataInsertRows {
			if err := write(ctx, idx); err != nil {
				return diff, err
			}
			diff.Written += len(idx)
			idx = idx[:0]
		}
	}
	if len(idx) > 0 {
		if err := write(ctx, idx); err != nil {
			return diff, err
		}
		diff.Written += len(idx)
	}
	return diff, nil
}

// WriteChangedDevices stores the devices whose live row is missing or
// differs (see writeChanged) and returns the live rows devices lacks.
func (c *Client) WriteChangedDevices(ctx context.Context, devices []pipeline.Device, syncedAt time.Time) (pipeline.MetadataDiff, error) {
	var f fingerprint
	return c.writeChanged(ctx, TableDevices, deviceFingerprintSQL, "''", len(devices),
		func(i int) string { return devices[i].ID },
		func(i int) uint64 { return f.device(devices[i]) },
		func(ctx context.Context, idx []int) error {
			part := make([]pipeline.Device, len(idx))
			for j, i := range idx {
				part[j] = devices[i]
			}
			return c.WriteDevices(ctx, part, syncedAt)
		})
}

// WriteChangedVariables stores the variables whose live row is missing or
// differs (see writeChanged) and returns the live rows vars lacks, each
// with its device.
func (c *Client) WriteChangedVariables(ctx context.Context, vars []pipeline.Variable, syncedAt time.Time) (pipeline.MetadataDiff, error) {
	var f fingerprint
	return c.writeChanged(ctx, TableVariables, variableFingerprintSQL, "device_id", len(vars),
		func(i int) string { return vars[i].ID },
		func(i int) uint64 { return f.variable(vars[i]) },
		func(ctx context.Context, idx []int) error {
			part := make([]pipeline.Variable, len(idx))
			for j, i := range idx {
				part[j] = vars[i]
			}
			return c.WriteVariables(ctx, part, syncedAt)
		})
}
