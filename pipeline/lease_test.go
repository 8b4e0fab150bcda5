package pipeline

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestLeaseHolderNamesThisHostAndProcess(t *testing.T) {
	if got, want := LeaseHolder(), fmt.Sprintf("%s/%d", hostname(), os.Getpid()); got != want {
		t.Errorf("LeaseHolder() = %q, want %q", got, want)
	}
}

func TestDeadLeaseHolderIsOnlyAGoneProcessOfThisHost(t *testing.T) {
	// A process that has exited and been reaped: its PID names no process
	// (until the kernel reuses it, which a test run does not reach).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run a child process: %v", err)
	}
	gone := cmd.ProcessState.Pid()
	for _, tt := range []struct {
		holder string
		want   bool
	}{
		{fmt.Sprintf("%s/%d", hostname(), gone), true},
		{LeaseHolder(), false},                                // this process
		{fmt.Sprintf("%s/%d", hostname(), 1), false},          // init lives
		{fmt.Sprintf("other-%s/%d", hostname(), gone), false}, // another host's PIDs are not ours to check
		{hostname(), false},
		{hostname() + "/not-a-pid", false},
		{hostname() + "/0", false},
		{"", false},
	} {
		if got := DeadLeaseHolder(tt.holder); got != tt.want {
			t.Errorf("DeadLeaseHolder(%q) = %v, want %v", tt.holder, got, tt.want)
		}
	}
}

func TestLeaseHeldErrorMatchesErrLeaseHeldAndNamesTheHolder(t *testing.T) {
	until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	err := fmt.Errorf("acquire: %w", &LeaseHeldError{Holder: "host/42", Expires: until, Where: "sync_lease"})
	if !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("errors.Is(%v, ErrLeaseHeld) = false", err)
	}
	for _, want := range []string{"host/42", "sync_lease", "2026-01-02T03:04:05Z"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
}
