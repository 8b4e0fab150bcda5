package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetsync/fleetsync/extract/fleet"
	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/load/clickhouse"
	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
	"github.com/fleetsync/fleetsync/state"
)

// profiled runs one more 5 M backfill inside this process, wired from the
// same packages as cmd/fleetsync (fleetapi client, load/clickhouse writer
// and metadata, ClickHouse state store, pipeline.Syncer, a metrics
// registry), under the CPU profiler, and keeps the top functions of the CPU
// and allocation profiles. fleetsim stays in its own process, so the profile
// holds fleetsync's work only.
func (b *bench) profiled(ctx context.Context) error {
	sim, err := b.fleet5M(ctx)
	if err != nil {
		return err
	}
	const db = "bench_profile"
	defer b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil)
	t := b.o.tune
	reg := prometheus.NewRegistry()
	ch, err := clickhouse.Open(ctx, clickhouse.Config{Addr: []string{b.ch.Addr()}, Database: db, MaxOpenConns: t.InsertWorkers + clickhouse.RollupConns}, nil, reg)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Schema().Migrate(ctx); err != nil {
		return err
	}
	api, err := fleetapi.New(fleetapi.Config{BaseURL: sim.url, Tokens: fleetapi.StaticToken(token), PageSize: t.PageSize}, nil, reg)
	if err != nil {
		return err
	}
	pm, err := pipeline.NewMetrics(reg)
	if err != nil {
		return err
	}
	w := &countingWriter{w: ch.Points()}
	src := fleet.New(api, fleet.Options{MaxInFlight: t.MaxInFlight})
	syncer := pipeline.NewSyncer(src, w, pipeline.Stages{Metadata: metadata.Plain(ch.Metadata())}, state.NewClickHouse(ch), pipeline.SyncOptions{
		Engine: pipeline.EngineOptions{
			RowsPerRequest:      t.RowsPerRequest,
			VariablesPerRequest: t.VariablesPerRequest,
			MaxInFlight:         t.MaxInFlight,
			Counts:              src,
			BatchRows:           t.BatchRows,
			BatchAge:            5 * time.Second,
			InsertWorkers:       t.InsertWorkers,
		},
		Retention: 730 * 24 * time.Hour, Margin: time.Hour, Lookback: time.Hour, SkipIdle: true, IdleRecheck: time.Hour,
	}, nil, pm)

	cpuPath := filepath.Join(b.dir, "cpu.pprof")
	f, err := os.Create(cpuPath)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	peak := watchHeap(filepath.Join(b.dir, "heap-peak.pprof"))
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	began := time.Now()
	sum, err := syncer.Cycle(ctx)
	wall := time.Since(began)
	pprof.StopCPUProfile()
	heapPeak := peak()
	if err != nil {
		return fmt.Errorf("profiled cycle: %w", err)
	}
	if len(sum.Failed) > 0 {
		return fmt.Errorf("profiled cycle: %d variables failed, first: %v", len(sum.Failed), sum.Failed[0])
	}
	heapPath := filepath.Join(b.dir, "heap.pprof")
	hf, err := os.Create(heapPath)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	err = pprof.Lookup("allocs").WriteTo(hf, 0)
	hf.Close()
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	b.profileNote = fmt.Sprintf("In-process cycle (same packages as `fleetsync sync`, no lease): %d points in %.2f s = %.0f rows/s; %s; Go heap objects peaked at %.0f MiB (runtime/metrics, sampled every 50 ms).",
		sum.Points, wall.Seconds(), float64(sum.Points)/wall.Seconds(), w.describe(), float64(heapPeak)/(1<<20))
	b.logf("%s", b.profileNote)
	goBin, err := goTool()
	if err != nil {
		return err
	}
	top, err := pprofTop(ctx, goBin, cpuPath, "-top", "-nodecount=10")
	if err != nil {
		return err
	}
	cum, err := pprofTop(ctx, goBin, cpuPath, "-top", "-cum", "-nodecount=12")
	if err != nil {
		return err
	}
	alloc, err := pprofTop(ctx, goBin, heapPath, "-sample_index=alloc_space", "-top", "-nodecount=8")
	if err != nil {
		return err
	}
	b.profileTop = top
	b.profileCum = cum
	b.profileAlloc = alloc
	if inuse, err := pprofTop(ctx, goBin, filepath.Join(b.dir, "heap-peak.pprof"), "-sample_index=inuse_space", "-top", "-nodecount=8"); err == nil {
		b.profileInuse = inuse
	}
	return nil
}

// watchHeap samples the live heap every 50 ms until the returned function
// is called, which returns the greatest value seen. Whenever the heap grows
// past its previous peak by a tenth it writes a heap profile to path, so the
// last one shows what was live near the peak.
func watchHeap(path string) func() uint64 {
	done := make(chan struct{})
	res := make(chan uint64, 1)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak {
				if v > peak+peak/10 {
					if f, err := os.Create(path); err == nil {
						_ = pprof.Lookup("heap").WriteTo(f, 0)
						f.Close()
					}
				}
				peak = v
			}
			select {
			case <-done:
				res <- peak
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-res }
}

// goTool finds the go command that built this program.
func goTool() (string, error) {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p, nil
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed for `go tool pprof`: %w", err)
	}
	return p, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// pprofTop runs `go tool pprof` on a profile and returns its table, without
// the header lines naming the temporary file.
func pprofTop(ctx context.Context, goBin, path string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, append(append([]string{"tool", "pprof"}, args...), path)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof %s: %w: %s", strings.Join(args, " "), err, out)
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "File: ") || strings.HasPrefix(l, "Build ID: ") || strings.HasPrefix(l, "Time: ") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n"), nil
}

// countingWriter records the size of every INSERT the pipeline makes.
type countingWriter struct {
	w    pipeline.Writer
	mu   sync.Mutex
	rows []int
}

func (c *countingWriter) count(n int) {
	c.mu.Lock()
	c.rows = append(c.rows, n)
	c.mu.Unlock()
}

// Begin opens a streamed INSERT whose rows are counted when it commits.
func (c *countingWriter) Begin(ctx context.Context) (pipeline.Insert, error) {
	in, err := c.w.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countingInsert{Insert: in, c: c}, nil
}

type countingInsert struct {
	pipeline.Insert
	c    *countingWriter
	rows int
}

func (i *countingInsert) Append(ch *pipeline.Batch) error {
	i.rows += ch.Len()
	return i.Insert.Append(ch)
}

func (i *countingInsert) Commit() error {
	i.c.count(i.rows)
	return i.Insert.Commit()
}

func (c *countingWriter) describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := figure{vals: make([]float64, len(c.rows))}
	for i, n := range c.rows {
		f.vals[i] = float64(n)
	}
	return fmt.Sprintf("%d INSERTs into datapoints of %s rows (median; min %s, max %s)", len(c.rows), f.fmt(f.median()), f.fmt(f.min()), f.fmt(f.max()))
}
