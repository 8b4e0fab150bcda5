package deploy

import (
	"encoding/xml"
	"strings"
	"testing"
)

// clusterXML is the part of deploy/clickhouse/cluster.xml the test reads.
type clusterXML struct {
	RemoteServers struct {
		Clusters []struct {
			XMLName xml.Name
			Shards  []struct {
				InternalReplication string `xml:"internal_replication"`
				Replicas            []struct {
					Host string `xml:"host"`
					Port int    `xml:"port"`
				} `xml:"replica"`
			} `xml:"shard"`
		} `xml:",any"`
	} `xml:"remote_servers"`
	ZooKeeper []struct {
		Host string `xml:"host"`
	} `xml:"zookeeper>node"`
	DDLPath string `xml:"distributed_ddl>path"`
}

// TestClickHouseClusterExampleMatchesTheShardedOverlay: the cluster example
// defines the cluster deploy/sharded names, with internal_replication in
// every shard (fleetsync's local tables are Replicated), ZooKeeper, the DDL
// queue, and macros giving each server its shard and replica.
func TestClickHouseClusterExampleMatchesTheShardedOverlay(t *testing.T) {
	var c clusterXML
	if err := xml.Unmarshal(mustRead(t, "clickhouse/cluster.xml"), &c); err != nil {
		t.Fatalf("clickhouse/cluster.xml: %v", err)
	}
	cfg := decodeConfig(t, "sharded/config.yaml", mustRead(t, "sharded/config.yaml"))
	if len(c.RemoteServers.Clusters) != 1 || c.RemoteServers.Clusters[0].XMLName.Local != cfg.ClickHouse.Cluster {
		t.Fatalf("remote_servers defines %d clusters; want exactly %q, the clickhouse.cluster of deploy/sharded", len(c.RemoteServers.Clusters), cfg.ClickHouse.Cluster)
	}
	cl := c.RemoteServers.Clusters[0]
	if len(cl.Shards) < 2 {
		t.Errorf("cluster %s has %d shards, want at least 2", cfg.ClickHouse.Cluster, len(cl.Shards))
	}
	for i, s := range cl.Shards {
		if s.InternalReplication != "true" {
			t.Errorf("shard %d: internal_replication %q, want true (the Replicated tables copy rows; Distributed must write one replica)", i+1, s.InternalReplication)
		}
		if len(s.Replicas) < 2 {
			t.Errorf("shard %d has %d replicas, want at least 2", i+1, len(s.Replicas))
		}
		for _, r := range s.Replicas {
			if !strings.HasPrefix(r.Host, "clickhouse-") || r.Port != 9000 {
				t.Errorf("shard %d: replica %s:%d is not one of the servers deploy/sharded connects to", i+1, r.Host, r.Port)
			}
		}
	}
	if len(c.ZooKeeper) == 0 || c.DDLPath == "" {
		t.Errorf("cluster.xml lacks ZooKeeper nodes (%d) or the distributed_ddl path (%q)", len(c.ZooKeeper), c.DDLPath)
	}
	var m struct {
		Shard   string `xml:"macros>shard"`
		Replica string `xml:"macros>replica"`
	}
	if err := xml.Unmarshal(mustRead(t, "clickhouse/macros.xml"), &m); err != nil || m.Shard == "" || m.Replica == "" {
		t.Errorf("clickhouse/macros.xml: shard %q, replica %q (%v); want both", m.Shard, m.Replica, err)
	}
}
