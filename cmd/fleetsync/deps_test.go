package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The product must not link package testing: it registers its flags and
// state in the binary, and it meant test helpers (and their globals) had
// crept into the product. The shared test ClickHouse lives in chtest, which
// only tests import.
func TestTheBinaryDoesNotLinkTesting(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "testing" || strings.HasSuffix(pkg, "/chtest") {
			t.Errorf("cmd/fleetsync links %s; move what needs it into a test-only package", pkg)
		}
	}
}
