package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestEveryCommandsHelpPrintsItsUsageOnce: flag's Parse prints the usage
// on --help itself; printing it again gave every command's usage twice.
func TestEveryCommandsHelpPrintsItsUsageOnce(t *testing.T) {
	for _, c := range commands() {
		for _, h := range []string{"--help", "-h"} {
			var out, errOut bytes.Buffer
			code := run(context.Background(), []string{c.name, h}, &out, &errOut, nil)
			if code != exitOK {
				t.Errorf("fleetsync %s %s: exit %d, stderr %q", c.name, h, code, errOut.String())
			}
			if n := strings.Count(out.String(), "Usage: "); n != 1 {
				t.Errorf("fleetsync %s %s printed its usage %d times:\n%s", c.name, h, n, out.String())
			}
		}
	}
}
