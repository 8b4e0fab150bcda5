package deploy

import (
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
)

// TestShardedOverlayRunsAnIndexedJobOfOnePodPerShard: deploy/sharded's
// CronJob runs an Indexed Job whose completions and parallelism equal
// sync.shard_count, retries each index on its own, never overlaps its runs,
// and its configuration leaves the shard index to JOB_COMPLETION_INDEX and
// gives each shard its own token on a ClickHouse cluster.
func TestShardedOverlayRunsAnIndexedJobOfOnePodPerShard(t *testing.T) {
	r := render(t, "sharded")
	if len(r.cronJobs) != 1 || len(r.configMaps) != 1 {
		t.Fatalf("deploy/sharded renders %d CronJobs and %d ConfigMaps, want one of each", len(r.cronJobs), len(r.configMaps))
	}
	cj := r.cronJobs[0]
	job := cj.Spec.JobTemplate.Spec
	cfg := decodeConfig(t, "deploy/sharded ConfigMap", []byte(r.configMaps[0].Data["config.yaml"]))
	count := cfg.Sync.ShardCount
	if count < 2 {
		t.Fatalf("sync.shard_count = %d, want the overlay to shard (2 or more)", count)
	}
	if job.CompletionMode == nil || *job.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completionMode = %v, want Indexed: each pod needs its JOB_COMPLETION_INDEX", job.CompletionMode)
	}
	if job.Completions == nil || int(*job.Completions) != count || job.Parallelism == nil || int(*job.Parallelism) != count {
		t.Errorf("completions %s, parallelism %s; want both equal to sync.shard_count %d, so every shard runs, at once", deref(job.Completions), deref(job.Parallelism), count)
	}
	if job.BackoffLimitPerIndex == nil || *job.BackoffLimitPerIndex < 1 {
		t.Errorf("backoffLimitPerIndex = %s, want a retry per shard", deref(job.BackoffLimitPerIndex))
	}
	if job.BackoffLimit != nil {
		t.Errorf("backoffLimit = %d is set beside backoffLimitPerIndex; it would count every shard's failures together", *job.BackoffLimit)
	}
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy = %q, want Forbid: a run's shards must not meet the next run's", cj.Spec.ConcurrencyPolicy)
	}
	if cfg.Sync.ShardIndex != nil {
		t.Errorf("config sets sync.shard_index %d; leave it out so each pod takes JOB_COMPLETION_INDEX", *cfg.Sync.ShardIndex)
	}
	if !strings.Contains(cfg.Source.TokenFile, "{shard}") {
		t.Errorf("source.token_file %q has no {shard}: the shards would share one token and its rate limit", cfg.Source.TokenFile)
	}
	if cfg.ClickHouse.Cluster == "" || !strings.Contains(cfg.ClickHouse.ZookeeperPath, "{shard}") {
		t.Errorf("clickhouse.cluster %q, zookeeper_path %q; want a cluster and a path holding {shard}", cfg.ClickHouse.Cluster, cfg.ClickHouse.ZookeeperPath)
	}
	checkPodHardening(t, "deploy/sharded CronJob", job.Template.Spec)
}

// deref prints an optional count, "unset" when absent.
func deref(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}
