package config

import (
	"strings"
	"testing"
)

func TestShardIndexComesFromJobCompletionIndexOnlyWhenNotSetElsewhere(t *testing.T) {
	count := "sync:\n  shard_count: 4\n"
	tests := []struct {
		name string
		file string
		env  []string
		want int
	}{
		{"neither set: default 0", base + count, nil, 0},
		{"job index alone", base + count, []string{"JOB_COMPLETION_INDEX=2"}, 2},
		{"file beats the job index", base + "sync:\n  shard_count: 4\n  shard_index: 1\n", []string{"JOB_COMPLETION_INDEX=3"}, 1},
		{"file's 0 beats the job index", base + "sync:\n  shard_count: 4\n  shard_index: 0\n", []string{"JOB_COMPLETION_INDEX=3"}, 0},
		{"environment beats the job index", base + count, []string{"JOB_COMPLETION_INDEX=3", "FLEETSYNC_SYNC_SHARD_INDEX=1"}, 1},
		{"empty key in the file counts as unset", base + "sync:\n  shard_count: 4\n  shard_index:\n", []string{"JOB_COMPLETION_INDEX=3"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.file), "test.yaml", tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Sync.ShardIndex != tt.want {
				t.Errorf("sync.shard_index = %d, want %d", cfg.Sync.ShardIndex, tt.want)
			}
		})
	}
}

func TestJobCompletionIndexThatIsNoNumberOrOutOfRangeIsAnError(t *testing.T) {
	for env, want := range map[string]string{
		"JOB_COMPLETION_INDEX=x": `JOB_COMPLETION_INDEX (sync.shard_index): "x" is not a whole number`,
		"JOB_COMPLETION_INDEX=4": "sync.shard_index: 4 is not below sync.shard_count (4)",
	} {
		_, err := Parse([]byte(base+"sync:\n  shard_count: 4\n"), "test.yaml", []string{env})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", env, err, want)
		}
	}
}

func TestTokenFileForReplacesTheShardPlaceholder(t *testing.T) {
	for file, want := range map[string]string{
		"/run/secrets/token-{shard}": "/run/secrets/token-3",
		"/run/secrets/{shard}/token": "/run/secrets/3/token",
		"/run/secrets/token":         "/run/secrets/token",
	} {
		if got := (SourceConfig{TokenFile: file}).TokenFileFor(3); got != want {
			t.Errorf("TokenFileFor(3) of %q = %q, want %q", file, got, want)
		}
	}
}
