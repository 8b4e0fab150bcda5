package clickhouse

import (
	"context"
	"strings"
	"testing"

	"github.com/fleetsync/fleetsync/load/clickhouse/chserver/chtest"
	"github.com/fleetsync/fleetsync/pipeline"
)

// The placement hashes ids in Go and ClickHouse hashes them in the
// shard_key DEFAULT: both must be one function, or rows keyed by the
// DEFAULT (parts written before the column, inserts by hand) would land
// apart from the rows fleetsync keys.
func TestSipHash64IsClickHousesSipHash64(t *testing.T) {
	c := newTestClient(t, chtest.Shared(t), nil)
	for _, id := range []string{"", "a", "1234567", "12345678", "123456789", "5f0c1a2b3c4d5e6f7a8b9c0d",
		"var-00", strings.Repeat("x", 255), strings.Repeat("y", 256), strings.Repeat("z", 1000), "é\x00'\\"} {
		var want uint64
		if err := c.Conn().QueryRow(context.Background(), "SELECT sipHash64(?)", id).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := sipHash64([]byte(id)); got != want {
			t.Errorf("sipHash64(%q) = %d, ClickHouse says %d", id, got, want)
		}
	}
}

func TestLayoutExtendsOnlyByAppendedShards(t *testing.T) {
	old := layout{1, 1}
	for _, tt := range []struct {
		l    layout
		want bool
	}{
		{layout{1, 1}, true},
		{layout{1, 1, 1}, true},
		{layout{1, 1, 5, 2}, true},
		{layout{1}, false},       // a shard removed
		{layout{3, 1}, false},    // a weight changed
		{layout{1, 3, 1}, false}, // a weight changed, then a shard appended
	} {
		if got := tt.l.extends(old); got != tt.want {
			t.Errorf("%v extends %v: %v, want %v", tt.l, old, got, tt.want)
		}
	}
	if w := (layout{1, 3, 2}).total(); w != 6 {
		t.Errorf("total weight %d, want 6", w)
	}
}

// A recorded variable keeps its key whatever the layout; any other is
// keyed by the hash over the recorded layout's total weight; a run of one
// variable's rows shares the key.
func TestPlacementKeysRecordedVariablesByTheirRecordAndOthersByTheHash(t *testing.T) {
	recorded := map[string]uint32{"old-a": 1, "old-b": 0}
	p := &placement{total: 3}
	for id := range recorded {
		p.hashes = append(p.hashes, sipHash64([]byte(id)))
	}
	// Sorted by hash, as loadPlacement reads them.
	if p.hashes[0] > p.hashes[1] {
		p.hashes[0], p.hashes[1] = p.hashes[1], p.hashes[0]
	}
	for _, h := range p.hashes {
		for id, k := range recorded {
			if sipHash64([]byte(id)) == h {
				p.keys = append(p.keys, k)
			}
		}
	}
	var b pipeline.Batch
	for _, id := range []string{"old-a", "old-a", "new-x", "old-b", "new-y", "new-y"} {
		b.Append(pipeline.Row{VariableID: id, Context: "{}"})
	}
	keys := p.fill(&b, nil)
	for i, id := range b.VariableID {
		want := sipHash64([]byte(id)) % 3
		if k, ok := recorded[id]; ok {
			want = uint64(k)
		}
		if keys[i] != want {
			t.Errorf("row %d (%s): key %d, want %d", i, id, keys[i], want)
		}
	}
}
