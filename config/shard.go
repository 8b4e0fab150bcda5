package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// JobCompletionIndexEnv is the variable Kubernetes sets in each pod of an
// Indexed Job: the pod's completion index, 0 to completions-1. It is the
// shard index when sync.shard_index is set neither in the file nor in
// FLEETSYNC_SYNC_SHARD_INDEX, so one manifest serves every shard.
const JobCompletionIndexEnv = "JOB_COMPLETION_INDEX"

// shardIndexUnset marks sync.shard_index as not given while the file and the
// environment are applied; no value a user can write reaches it.
const shardIndexUnset = math.MinInt

// ShardPlaceholder in source.token_file is replaced by the shard index, so
// that each shard reads its own token (and gets its own rate limit).
const ShardPlaceholder = "{shard}"

// shardIndexFromJob sets cfg.Sync.ShardIndex when the file and the
// environment left it unset: from JOB_COMPLETION_INDEX when that is set, else
// the default 0.
func shardIndexFromJob(cfg *Config, env []string) error {
	if cfg.Sync.ShardIndex != shardIndexUnset {
		return nil
	}
	cfg.Sync.ShardIndex = Default().Sync.ShardIndex
	val, ok := lookupEnv(env, JobCompletionIndexEnv)
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(val))
	if err != nil {
		return fmt.Errorf("%s (sync.shard_index): %q is not a whole number; run fleetsync in an Indexed Job, or set sync.shard_index", JobCompletionIndexEnv, val)
	}
	cfg.Sync.ShardIndex = n
	return nil
}

// lookupEnv is os.LookupEnv over an os.Environ()-style list; the last entry
// of a name wins, as in exec.Cmd.
func lookupEnv(env []string, name string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if n, v, ok := strings.Cut(kv, "="); ok && n == name {
			val, found = v, true
		}
	}
	return val, found
}

// TokenFileFor is source.token_file for shard index: ShardPlaceholder
// replaced by the index. Without the placeholder every shard reads the same
// file.
func (s SourceConfig) TokenFileFor(index int) string {
	return strings.ReplaceAll(s.TokenFile, ShardPlaceholder, strconv.Itoa(index))
}
