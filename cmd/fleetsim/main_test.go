package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
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
	// startRun cancels the run at the end of the test and fails it unless
	// run then returns nil.
	base := startRun(t, "--devices", "2", "--points", "10", "--token", "t1")
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("ready line gave %q, want \"fleetsim listening on http://127.0.0.1:PORT\"", base)
	}
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
}

// startRun runs the command with args on a free port and returns its base
// URL; the command is stopped, and must return nil, at the end of the test.
func startRun(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("reading the ready line: %v (run: %v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run after cancel: %v, want nil", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("run did not return after its context was cancelled")
		}
	})
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "fleetsim listening on ")
	if !ok {
		t.Fatalf("ready line %q, want \"fleetsim listening on URL\"", line)
	}
	return base
}

// getJSON GETs base+path with the token t1 and decodes the body.
func getJSON(t *testing.T, base, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("X-Auth-Token", "t1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
	}
	return m
}

func TestFlagsSetLastActivityPublicURLAndVariableFaults(t *testing.T) {
	base := startRun(t, "--devices", "3", "--points", "10", "--token", "t1",
		"--last-activity", "none", "--public-url", "https://proxy.example/fleet",
		"--reject-variable", "v-rejected", "--undecodable-variable", "v-bad", "--undecodable-variable", "v-worse")
	info := getJSON(t, base, "/_sim/info")
	if info["last_activity"] != "none" || info["public_url"] != "https://proxy.example/fleet" {
		t.Errorf("/_sim/info: last_activity %v, public_url %v", info["last_activity"], info["public_url"])
	}
	faults := getJSON(t, base, "/_sim/faults")
	if fmt.Sprint(faults["reject_variables"]) != "[v-rejected]" || fmt.Sprint(faults["undecodable_variables"]) != "[v-bad v-worse]" {
		t.Errorf("/_sim/faults: %v", faults)
	}
	devs := getJSON(t, base, "/api/v2.0/devices/?page_size=1")
	if next, _ := devs["next"].(string); !strings.HasPrefix(next, "https://proxy.example/fleet/api/v2.0/devices/?") {
		t.Errorf("next link %v does not use --public-url", devs["next"])
	}
	for _, d := range devs["results"].([]any) {
		if la := d.(map[string]any)["lastActivity"]; la != nil {
			t.Errorf("--last-activity none: a device's lastActivity is %v", la)
		}
	}
}

func TestTheDefaultLastActivityIsAnyWrite(t *testing.T) {
	base := startRun(t, "--devices", "1", "--points", "10", "--token", "t1")
	if got := getJSON(t, base, "/_sim/info")["last_activity"]; got != "any-write" {
		t.Errorf("default last_activity %v, want any-write", got)
	}
	d := getJSON(t, base, "/api/v2.0/devices/")["results"].([]any)[0].(map[string]any)
	if _, isNumber := d["lastActivity"].(float64); !isNumber {
		t.Errorf("default lastActivity %v, want a number", d["lastActivity"])
	}
}

func TestBadLastActivityAndPublicURLAreRejected(t *testing.T) {
	for _, args := range [][]string{{"--last-activity", "latest"}, {"--public-url", "proxy.example"}} {
		err := run(context.Background(), append(args, "--listen", "127.0.0.1:0", "--token", "t"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), args[1]) {
			t.Errorf("%v: got %v, want an error naming %q", args, err, args[1])
		}
	}
}

func TestEveryFlagOfTheHelpIsInTheGuideAndTheLimitFlagsAreThere(t *testing.T) {
	var stdout, stderr strings.Builder
	if err := run(context.Background(), []string{"--help"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v, want flag.ErrHelp", err)
	}
	guide, err := os.ReadFile("../../docs/fleetsim.md")
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if f, ok := strings.CutPrefix(l, "  -"); ok {
			flags = append(flags, strings.Fields(f)[0])
		}
	}
	for _, f := range []string{"rate-limit", "burst", "rate-limit-retry-after", "quota", "quota-exhausted-for", "rate-limit-rate", "retry-after"} {
		if !slices.Contains(flags, f) {
			t.Errorf("--help does not document -%s", f)
		}
	}
	for _, f := range flags {
		if !strings.Contains(string(guide), "`--"+f+" ") && !strings.Contains(string(guide), "`--"+f+"`") {
			t.Errorf("docs/fleetsim.md does not document --%s", f)
		}
	}
}

func TestSeriesCutAndOrderFlagsAreIndependentAndTheOlderOrdersStillWork(t *testing.T) {
	for _, c := range []struct {
		args       []string
		cut, order string
	}{
		{nil, "newest", "newest-first"},
		{[]string{"--series-cut", "any", "--series-order", "shuffled"}, "any", "shuffled"},
		{[]string{"--series-order", "oldest-first", "--series-cut", "mixed"}, "mixed", "oldest-first"},
		{[]string{"--series-order", "oldest"}, "oldest", "oldest-first"},
		{[]string{"--series-order", "newest-ascending"}, "newest", "oldest-first"},
		{[]string{"--series-cut", "oldest", "--series-order", "shuffled"}, "oldest", "shuffled"},
	} {
		base := startRun(t, append([]string{"--devices", "1", "--points", "10", "--token", "t1"}, c.args...)...)
		info := getJSON(t, base, "/_sim/info")
		if info["series_cut"] != c.cut || info["series_order"] != c.order {
			t.Errorf("%v: /_sim/info series_cut %v, series_order %v; want %s, %s", c.args, info["series_cut"], info["series_order"], c.cut, c.order)
		}
	}
	for _, args := range [][]string{{"--series-cut", "sideways"}, {"--series-order", "sideways"}, {"--series-cut", "any", "--series-order", "oldest"}} {
		err := run(context.Background(), append(args, "--listen", "127.0.0.1:0", "--token", "t"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), args[len(args)-1]) {
			t.Errorf("%v: got %v, want an error naming %q", args, err, args[len(args)-1])
		}
	}
}
