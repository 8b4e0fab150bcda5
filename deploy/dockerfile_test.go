package deploy

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, COPY, USER, ...
	Args string
}

func parseDockerfile(text string) []instruction {
	var out []instruction
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		out = append(out, instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)})
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if body, cont := strings.CutSuffix(trimmed, `\`); cont {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return out
}

var goDirectiveRE = regexp.MustCompile(`(?m)^go (\d+\.\d+)`)

// TestDockerfileBuildsAStaticNonRootImage checks the image build that cannot
// run here (no Docker engine): a Go builder of the main module's Go version
// builds ./cmd/fleetsync with CGO_ENABLED=0, and the final stage is
// distroless static, non-root, with the uid the manifests pin.
func TestDockerfileBuildsAStaticNonRootImage(t *testing.T) {
	ins := parseDockerfile(string(mustRead(t, "Dockerfile")))
	var froms []string
	lastFrom := -1
	for i, in := range ins {
		if in.Cmd == "FROM" {
			froms = append(froms, in.Args)
			lastFrom = i
		}
	}
	if len(froms) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a builder and a runtime stage", len(froms))
	}

	m := goDirectiveRE.FindSubmatch(mustRead(t, "../go.mod"))
	if m == nil {
		t.Fatalf("../go.mod has no go directive")
	}
	wantBuilder := "golang:" + string(m[1])
	if f := strings.Fields(froms[0]); len(f) != 3 || f[0] != wantBuilder || !strings.EqualFold(f[1], "AS") {
		t.Errorf("builder stage FROM %q, want %q AS <name> (the main module's Go version)", froms[0], wantBuilder)
	}

	built := false
	for _, in := range ins[:lastFrom] {
		if in.Cmd == "RUN" && strings.Contains(in.Args, "go build") {
			built = true
			if !strings.Contains(in.Args, "CGO_ENABLED=0") || !strings.Contains(in.Args, "./cmd/fleetsync") {
				t.Errorf("builder RUN %q: want CGO_ENABLED=0 go build ... ./cmd/fleetsync", in.Args)
			}
		}
	}
	if !built {
		t.Errorf("no RUN ... go build in the builder stage")
	}

	final := froms[len(froms)-1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") || !strings.HasSuffix(final, ":nonroot") {
		t.Errorf("runtime stage FROM %q, want gcr.io/distroless/static...:nonroot", final)
	}
	var user, entrypoint string
	copied := false
	for _, in := range ins[lastFrom+1:] {
		switch in.Cmd {
		case "USER":
			user = in.Args
		case "ENTRYPOINT":
			entrypoint = in.Args
		case "COPY":
			copied = copied || strings.HasPrefix(in.Args, "--from=")
		}
	}
	if !copied {
		t.Errorf("runtime stage copies nothing from the builder")
	}
	if !strings.Contains(entrypoint, "fleetsync") {
		t.Errorf("ENTRYPOINT %q does not run fleetsync", entrypoint)
	}
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.ParseInt(uid, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("runtime USER %q, want a numeric non-root uid (runAsNonRoot can only verify numeric ones)", user)
	}
	pod := render(t, "base").cronJobs[0].Spec.JobTemplate.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != n {
		t.Errorf("image runs as uid %d, but the CronJob pins another runAsUser", n)
	}
}
