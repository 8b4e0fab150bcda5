package clickhouse

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseFetchReadsTheFetchesOfTheReplicationLog(t *testing.T) {
	for _, tc := range []struct {
		entry string
		want  fetch
		ok    bool
	}{
		{"format version: 4\ncreate_time: 2026-11-26 04:00:00\nsource replica: s2r1\nblock_id: 202611_1_2\nget\n202611_0_0_0\n", fetch{part: "202611_0_0_0", source: "s2r1"}, true},
		{"format version: 4\ncreate_time: 2026-11-26 04:00:00\nsource replica: s2r1\nblock_id: \nmerge\n202611_0_0_0\n202611_1_1_0\ninto\n202611_0_1_1\n", fetch{}, false},
		{"get\n", fetch{}, false},
		{"", fetch{}, false},
	} {
		got, ok := parseFetch(tc.entry)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("parseFetch(%q) = %+v, %v; want %+v, %v", tc.entry, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLaggingWaitsForEveryFetchDueAtTheFirstLookOfEveryReplicaUp(t *testing.T) {
	const shard = "/clickhouse/tables/01/db/datapoints_local"
	due := map[string]map[string]dueFetch{
		shard + "/r1": {},
		shard + "/r3": {"p_2_2_0": {fetch: fetch{part: "p_2_2_0", source: "r1"}, index: 7}},
		shard + "/r2": {
			"p_1_1_0": {fetch: fetch{part: "p_1_1_0", source: "r1"}, index: -1}, // queued at the first look
			"p_2_2_0": {fetch: fetch{part: "p_2_2_0", source: "r1"}, index: 7},  // in the log past its pointer
		},
	}
	up := func(name string, pointer int64, queue ...string) replica {
		r := replica{shard: shard, name: name, active: true, pointer: pointer}
		for _, p := range queue {
			r.fetches = append(r.fetches, fetch{part: p, source: "r1"})
		}
		return r
	}
	for _, tc := range []struct {
		name string
		now  []replica
		want string // the lagging replica, its missing part, the part's writer and whether none that is up holds it; "" for none
	}{
		{"both fetches pending", []replica{up("r1", 8), up("r2", 7, "p_1_1_0")}, "r2 p_1_1_0 r1 false"},
		{"log pulled, both queued", []replica{up("r1", 8), up("r2", 8, "p_1_1_0", "p_2_2_0")}, "r2 p_1_1_0 r1 false"},
		{"one fetched", []replica{up("r1", 8), up("r2", 8, "p_2_2_0")}, "r2 p_2_2_0 r1 false"},
		{"both fetched; a later fetch pending", []replica{up("r1", 9), up("r2", 8, "p_3_3_0")}, ""},
		{"the writer is down", []replica{{shard: shard, name: "r1"}, up("r2", 8, "p_2_2_0")}, "r2 p_2_2_0 r1 true"},
		{"the writer is down, a third replica that is up has the part", []replica{{shard: shard, name: "r1"}, up("r2", 8, "p_2_2_0"), up("r3", 8)}, "r2 p_2_2_0 r1 false"},
		{"the writer is down, a third replica lacks the part too", []replica{{shard: shard, name: "r1"}, up("r2", 8, "p_2_2_0"), up("r3", 8, "p_2_2_0")}, "r2 p_2_2_0 r1 true"},
		{"the lagging replica is down", []replica{up("r1", 8), {shard: shard, name: "r2", pointer: 7}}, ""},
		{"a replica new since the first look", []replica{up("r1", 8), up("r4", 0, "p_1_1_0")}, ""},
	} {
		got := ""
		if lag := lagging(tc.now, due); lag != nil {
			got = fmt.Sprintf("%s %s %s %v", lag.Replica, lag.Part, lag.Writer, lag.Unreachable)
		}
		if got != tc.want {
			t.Errorf("%s: lagging = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRestartedReplicasAreThoseUpUnderANewIsActiveNode(t *testing.T) {
	before := []replica{{name: "a", active: true, since: 10}, {name: "b", active: true, since: 11}, {name: "c"}, {name: "d", active: true, since: 13}}
	after := []replica{{name: "a", active: true, since: 10}, {name: "b", active: true, since: 20}, {name: "c", active: true, since: 21}, {name: "d"}, {name: "e", active: true, since: 22}}
	if got := fmt.Sprint(restartedReplicas(before, after)); got != "[b c e]" {
		t.Errorf("restartedReplicas = %s, want [b c e]: b restarted, c came up, e joined; d went down", got)
	}
}

func TestLaggingReplicaErrorIsOneLineNamingTheShardThePartTheReplicasAndTheFix(t *testing.T) {
	err := &LaggingReplicaError{Shard: "/clickhouse/tables/02/db/datapoints_local", ShardName: "02", Replica: "s2r2", Part: "202311_3_3_0", Writer: "s2r1", Unreachable: true}
	msg := err.Error()
	for _, want := range []string{"shard 02", "part 202311_3_3_0 of datapoints_local", "held only by replica s2r1, which is down", "replica s2r2 lacks it", "start s2r1",
		"force_restore_data", "fleetsync backfill --from 2023-11-01T00:00:00Z --to 2023-12-01T00:00:00Z"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "\n") || !err.Retryable() {
		t.Errorf("want one line and retryable: %q", msg)
	}
	t.Log(msg)
}
