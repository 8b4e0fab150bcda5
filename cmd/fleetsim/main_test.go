package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHelpDocumentsEveryContractFlagOnce(t *testing.T) {
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{"--help"}, &stdout, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v, want flag.ErrHelp", err)
	}
	help := stderr.String()
	if n := strings.Count(help, "Usage: fleetsim"); n != 1 {
		t.Errorf("the usage is printed %d times, want once:\n%s", n, help)
	}
	// The flags of ../../shared/spec/contract.md that scripts rely on.
	for _, f := range []string{"listen", "seed", "devices", "variables", "points", "span", "token", "org-token", "account-token", "retention"} {
		if !strings.Contains(help, "  -"+f+" ") && !strings.Contains(help, "  -"+f+"\n") {
			t.Errorf("--help does not document -%s:\n%s", f, help)
		}
	}
	if !strings.Contains(help, "(default 730d)") {
		t.Errorf("--help does not give the retention default 730d:\n%s", help)
	}
}

func TestABadFlagIsReportedWithoutTheUsage(t *testing.T) {
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{"--no-such-flag"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("got %v, want an error naming the flag", err)
	}
	if stderr.Len() != 0 {
		t.Errorf("a bad flag printed %q to stderr, want nothing (main prints the one-line error)", stderr.String())
	}
}

func TestRunPrintsTheListeningLineAndServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--devices", "2", "--points", "10", "--token", "t1"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the ready line: %v", err)
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "fleetsim listening on ")
	if !ok || !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("ready line %q, want \"fleetsim listening on http://127.0.0.1:PORT\"", line)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	req, _ := http.NewRequest("GET", base+"/api/v2.0/devices/", nil)
	req.Header.Set("X-Auth-Token", "t1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET devices with --token t1: %d, want 200", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel: %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
}
