package config

import "strings"

// validateCluster adds the problems of clickhouse.cluster and
// clickhouse.zookeeper_path to p. The path goes into DDL inside quotes and
// must keep shards apart, so it is checked even while cluster is empty.
func (c *ClickHouseConfig) validateCluster(p *problems) {
	if c.Cluster != "" && !identifier.MatchString(c.Cluster) {
		p.addf("clickhouse.cluster", "%q is not a plain identifier; write a cluster name of the servers' remote_servers (letters, digits, _), or leave it empty for one server", c.Cluster)
	}
	zp := c.ZookeeperPath
	switch {
	case !strings.HasPrefix(zp, "/") || strings.ContainsAny(zp, "'\\\"` \n\t"):
		p.addf("clickhouse.zookeeper_path", "%q is not an absolute ZooKeeper path; write it like /clickhouse/tables/{shard}", zp)
	case !strings.Contains(zp, "{shard}"):
		p.addf("clickhouse.zookeeper_path", "%q lacks the {shard} macro, so every shard would share one replica set; write it like /clickhouse/tables/{shard}", zp)
	}
}
