package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// goBenchmarks runs the Go micro-benchmarks of the two hot loops on one
// core: the raw-series decoder (extract/fleetapi) and the batch builder
// (pipeline), -runs times each, and records points/s and allocations per
// point.
func (b *bench) goBenchmarks(ctx context.Context) error {
	goBin, err := goTool()
	if err != nil {
		return err
	}
	gomod, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	args := []string{"test", "-run", "^$", "-bench", "^(BenchmarkDecodeSeries|BenchmarkBatchBuild)$", "-benchtime", "1s",
		"-count", strconv.Itoa(b.o.runs), "-cpu", "1", "./extract/fleetapi/", "./pipeline/"}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, tailString(string(out), 1500))
	}
	sec := b.section("7. Go benchmarks of the hot loops, one core")
	sec.note("`go %s` (the harness runs it from the module root).", strings.Join(args, " "))
	figs := map[string]*figure{}
	fig := func(key, name, unit string, digits int) *figure {
		if f, ok := figs[key]; ok {
			return f
		}
		f := sec.fig(key, name, unit, digits)
		figs[key] = f
		return f
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		var what string
		switch {
		case name == "DecodeSeries":
			what = "raw-series decoder (fleetapi.DecodeSeries)"
		case strings.HasPrefix(name, "BatchBuild/"):
			what = "batch builder (frameSink append path), " + strings.TrimPrefix(name, "BatchBuild/") + " contexts"
		default:
			continue
		}
		rate := fig("go-"+name, what+": points/s", "points/s", 0)
		allocs := fig("go-"+name+"-allocs", what+": allocations per point", "allocs", 3)
		// After the name and the iteration count come value-unit pairs.
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "points/s":
				rate.add(v)
			case "allocs/point":
				allocs.add(v)
			}
		}
	}
	if _, ok := figs["go-DecodeSeries"]; !ok {
		return fmt.Errorf("no BenchmarkDecodeSeries points/s in the output: %s", tailString(string(out), 1500))
	}
	return nil
}

func tailString(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}
