package clickhouse

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
)

// Where a variable's rows live on a cluster (issue 25).
//
// A Distributed table sends a row whose sharding key is k to the shard
// whose slot range holds k % W, W being the total weight of the shards of
// remote_servers, each shard owning as many consecutive slots as its
// weight, in the order they are listed. The sharded tables (datapoints and
// the analyst tables) are sharded by a column of their own, shard_key, and
// every row of a variable carries the same key: the variable's, which is
// chosen once and never changes:
//
//   - A variable with a record in variable_shards (a table kept whole on
//     every node) keeps the recorded key.
//   - Any other variable gets sipHash64(variable_id) % W, W being the total
//     weight of the layout `fleetsync migrate` last recorded (shard_layout).
//
// Because a key is below the W it was computed with, and appending a shard
// to remote_servers neither changes that key nor the slots of the shards
// before it, rows keep going where the variable's rows are. Growing the
// cluster is then: `fleetsync migrate` records every variable that has
// rows, with the key its rows carry, and then the new layout, so that
// variables seen from then on spread over every shard (see migrateLayout).
// Before any growth the table is empty and every key is the hash, which is
// also what the column's DEFAULT gives, and where the sipHash64(variable_id)
// sharding of schema version 4 put the rows of a cluster laid out before
// the key existed.
//
// Writers agree without talking to each other: the key of a variable is a
// function of the records and the recorded layout, which change only when
// migrate grows the cluster, with the syncs stopped, and reach every server
// before migrate returns (a quorum of all of them). A writer loads both
// once per cycle (a sorted array of 12 bytes per recorded variable: 12 MB
// for 10^6 variables, nothing before the first growth) and keys each row
// in memory, with no round trip per batch.

// shardKeyColumn is the sharded tables' sharding key column on a cluster.
const shardKeyColumn = "shard_key"

// Tables of the placement, kept whole on every node of a cluster and
// absent on one server.
const (
	// TableVariableShards records the key of every variable that had rows
	// when the cluster last grew.
	TableVariableShards = "variable_shards"
	// TableShardLayout records the shard weights the keys are computed for.
	TableShardLayout = "shard_layout"
)

// layout is the weight of each shard of a cluster, in the order of
// remote_servers (shard_num).
type layout []uint64

// total is the layout's total weight: the modulus of the sharding key.
func (l layout) total() uint64 {
	var w uint64
	for _, x := range l {
		w += x
	}
	return w
}

// extends reports whether l is old with zero or more shards appended:
// then every key computed for old routes to the same shard under l.
func (l layout) extends(old layout) bool {
	return len(l) >= len(old) && slices.Equal(l[:len(old)], old)
}

func (l layout) String() string {
	parts := make([]string, len(l))
	for i, w := range l {
		parts[i] = fmt.Sprint(w)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// currentLayout is the cluster's layout as the connected server's
// remote_servers gives it.
func (c *Schema) currentLayout(ctx context.Context) (layout, error) {
	rows, err := c.conn.Query(ctx, "SELECT shard_num, any(shard_weight) FROM system.clusters WHERE cluster = ? GROUP BY shard_num ORDER BY shard_num", c.cfg.Cluster)
	if err != nil {
		return nil, fmt.Errorf("read the shards of cluster %s: %w", c.cfg.Cluster, err)
	}
	defer rows.Close()
	var out layout
	for rows.Next() {
		var num, weight uint32
		if err := rows.Scan(&num, &weight); err != nil {
			return nil, fmt.Errorf("read the shards of cluster %s: %w", c.cfg.Cluster, err)
		}
		out = append(out, uint64(weight))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the shards of cluster %s: %w", c.cfg.Cluster, err)
	}
	return out, nil
}

// recordedLayouts are the first layout migrate recorded (the one the
// shard_key column's DEFAULT was written for) and the last (the one new
// variables are placed by); both nil when none was recorded (a database
// not yet migrated, or laid out before the key existed).
func (c cluster) recordedLayouts(ctx context.Context) (first, last layout, err error) {
	var exists uint8
	if err := c.conn.QueryRow(ctx, "SELECT count() > 0 FROM system.tables WHERE database = ? AND name = ?",
		c.cfg.Database, c.cfg.TablePrefix+TableShardLayout).Scan(&exists); err != nil {
		return nil, nil, fmt.Errorf("read the recorded shard layout: %w", err)
	}
	if exists == 0 {
		return nil, nil, nil
	}
	var f, l []uint64
	var n uint64
	if err := c.conn.QueryRow(ctx, "SELECT argMin(weights, version), argMax(weights, version), count() FROM "+c.table(TableShardLayout)).Scan(&f, &l, &n); err != nil {
		return nil, nil, fmt.Errorf("read the recorded shard layout: %w", err)
	}
	if n == 0 {
		return nil, nil, nil
	}
	return layout(f), layout(l), nil
}

// recordLayout records l as the layout new variables are placed by.
func (c *Schema) recordLayout(ctx context.Context, l layout) error {
	return c.insertRows(ctx, TableShardLayout, "weights, recorded_at, version", 1, func(int) []any {
		return []any{[]uint64(l), time.Now().UTC(), c.nextVersion()}
	})
}

// placement keys the rows of a cluster's sharded tables: the recorded
// variables, sorted by the sipHash64 of their id, and the modulus of the
// others.
type placement struct {
	total  uint64
	hashes []uint64
	keys   []uint32
}

// key is the sharding key of the variable id.
func (p *placement) key(id string) uint64 {
	h := sipHash64([]byte(id))
	if i, ok := slices.BinarySearch(p.hashes, h); ok {
		return uint64(p.keys[i])
	}
	return h % p.total
}

// fill sets keys to the sharding key of every row of ch; the rows of one
// variable are usually consecutive, so each run is hashed once.
func (p *placement) fill(ch *pipeline.Batch, keys []uint64) []uint64 {
	keys = grow(keys, ch.Len())
	for i, id := range ch.VariableID {
		if i > 0 && id == ch.VariableID[i-1] {
			keys[i] = keys[i-1]
			continue
		}
		keys[i] = p.key(id)
	}
	return keys
}

// loadPlacement reads the recorded layout and variables into the client,
// which keys every row it writes by them until the next load (each
// EnsureSchema, so each cycle). Two records of one hash (two ids that
// collide, or one variable recorded twice) resolve to the smallest key, so
// every writer resolves them alike.
func (c cluster) loadPlacement(ctx context.Context) (*placement, error) {
	_, l, err := c.recordedLayouts(ctx)
	if err != nil {
		return nil, err
	}
	if l == nil || l.total() == 0 {
		return nil, fmt.Errorf("no shard layout recorded in %s; run fleetsync migrate", c.table(TableShardLayout))
	}
	p := &placement{total: l.total()}
	rows, err := c.conn.Query(ctx, "SELECT sipHash64(variable_id) AS h, min(shard_key) FROM "+c.table(TableVariableShards)+" GROUP BY h ORDER BY h")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(TableVariableShards), err)
	}
	defer rows.Close()
	for rows.Next() {
		var h, k uint64
		if err := rows.Scan(&h, &k); err != nil {
			return nil, fmt.Errorf("read %s: %w", c.table(TableVariableShards), err)
		}
		p.hashes = append(p.hashes, h)
		p.keys = append(p.keys, uint32(k))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(TableVariableShards), err)
	}
	c.place.Store(p)
	return p, nil
}

// placementFor is the placement rows are keyed by: the one loaded last,
// or loaded now. It is nil on one server.
func (c cluster) placementFor(ctx context.Context) (*placement, error) {
	if !c.clustered() {
		return nil, nil
	}
	if p := c.place.Load(); p != nil {
		return p, nil
	}
	return c.loadPlacement(ctx)
}

// sipHash64 is ClickHouse's sipHash64 of a string: SipHash-2-4 with a zero
// key.
func sipHash64(b []byte) uint64 {
	v0 := uint64(0x736f6d6570736575)
	v1 := uint64(0x646f72616e646f6d)
	v2 := uint64(0x6c7967656e657261)
	v3 := uint64(0x7465646279746573)
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	n := len(b)
	for len(b) >= 8 {
		m := binary.LittleEndian.Uint64(b)
		v3 ^= m
		round()
		round()
		v0 ^= m
		b = b[8:]
	}
	var last [8]byte
	copy(last[:], b)
	last[7] = byte(n)
	m := binary.LittleEndian.Uint64(last[:])
	v3 ^= m
	round()
	round()
	v0 ^= m
	v2 ^= 0xff
	round()
	round()
	round()
	round()
	return v0 ^ v1 ^ v2 ^ v3
}

// keyColumn is ", shard_key" on a cluster, for the column list of an
// INSERT into a sharded table, and "" on one server.
func (c cluster) keyColumn() string {
	if !c.clustered() {
		return ""
	}
	return ", " + shardKeyColumn
}

// keyAggregate is ", any(shard_key) AS placed_key" on a cluster, for an
// INSERT ... SELECT into a sharded table from datapoints grouped by
// variable: every row of a variable carries its key. On one server it is
// "".
func (c cluster) keyAggregate() string {
	if !c.clustered() {
		return ""
	}
	return ", any(" + shardKeyColumn + ") AS placed_key"
}

// placedKey is ", placed_key" on a cluster, "" on one server: the key
// keyAggregate computed, selected from the subquery it is in.
func (c cluster) placedKey() string {
	if !c.clustered() {
		return ""
	}
	return ", placed_key"
}
