package deploy

import (
	"regexp"
	"testing"
)

var markdownLinkRE = regexp.MustCompile(`\]\(#([^)]+)\)`)

// TestOperationsGuideLinksResolve fails on a link inside
// docs/operations.md to a section that does not exist (a renamed heading
// would otherwise silently break the runbook cross-references).
func TestOperationsGuideLinksResolve(t *testing.T) {
	anchors := markdownAnchors(t, operationsDocPath)
	for _, m := range markdownLinkRE.FindAllStringSubmatch(string(mustRead(t, operationsDocPath)), -1) {
		if !anchors[m[1]] {
			t.Errorf("%s links to #%s, which no heading defines", operationsDocPath, m[1])
		}
	}
}
