package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// compressionStage measures what clickhouse.compression costs and saves:
// the 5 M-point backfill by the fleetsync binary with compression none and
// with lz4, everything else at the configuration's defaults (unlike the
// e2e part, which tunes the sync section). The two modes alternate within
// each round, so background load hits both alike.
type compressionStage struct {
	b    *bench
	sim  *simProc
	want int64
	sec  *section
	figs map[string]*compressionFigures
}

// compressionModes are the clickhouse.compression values compared.
var compressionModes = []string{"none", "lz4"}

// compressionFigures are one mode's figures.
type compressionFigures struct {
	wall, cpu, chCPU, simCPU, chRead *figure
}

func (st *compressionStage) prepare(ctx context.Context) error {
	b := st.b
	s := b.o.sizes
	var err error
	if st.sim, err = b.fleet5M(ctx); err != nil {
		return err
	}
	st.want = int64(s.devices*s.vars-1) * int64(s.points)
	st.sec = b.section(fmt.Sprintf("Compression: the backfill of %d variables × %d points with clickhouse.compression none and lz4", s.devices*s.vars, s.points))
	st.sec.note("`%s sync` with only `source.base_url`, `source.token`, `clickhouse.addr`, `clickhouse.database` and `clickhouse.compression` set: every other key at its default (so `rows_per_request: 10000` cuts frames here, alike in both modes). ClickHouse is on loopback, where `auto` means none; a remote server gets lz4. The modes alternate within each round, a fresh database per run.", filepath.Join(b.o.bin, "fleetsync"))
	st.sec.note("Bytes read by clickhouse-server is the growth of `rchar` in /proc/PID/io over the run: the insert stream from fleetsync plus any file reads, so it shows the wire volume only roughly.")
	st.figs = map[string]*compressionFigures{}
	for _, m := range compressionModes {
		st.figs[m] = &compressionFigures{
			wall:   st.sec.fig("", "wall time, compression "+m, "s", 2),
			cpu:    st.sec.fig("", "fleetsync CPU per million points, compression "+m, "CPU-s", 2),
			chCPU:  st.sec.fig("", "clickhouse-server CPU per million points, compression "+m, "CPU-s", 2),
			simCPU: st.sec.fig("", "fleetsim CPU per million points, compression "+m, "CPU-s", 2),
			chRead: st.sec.fig("", "bytes read by clickhouse-server per point, compression "+m, "B", 1),
		}
	}
	return nil
}

func (st *compressionStage) run(ctx context.Context, r int) error {
	modes := compressionModes
	if r%2 == 1 {
		// Alternate which goes first, so neither always follows the other's
		// background merges.
		modes = []string{modes[1], modes[0]}
	}
	for _, m := range modes {
		if err := st.runMode(ctx, r, m); err != nil {
			return fmt.Errorf("compression %s: %w", m, err)
		}
	}
	return nil
}

func (st *compressionStage) runMode(ctx context.Context, r int, mode string) error {
	b := st.b
	db := fmt.Sprintf("bench_compression_%s_%d", mode, r+1)
	cfg := filepath.Join(b.dir, db+".yaml")
	text := fmt.Sprintf("source:\n  base_url: %s\n  token: %s\nclickhouse:\n  addr: [%q]\n  database: %s\n  compression: %s\nmetrics:\n  listen: \"127.0.0.1:0\"\nlog:\n  level: info\n  format: json\n",
		st.sim.url, token, b.ch.Addr(), db, mode)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		return fmt.Errorf("write fleetsync config: %w", err)
	}
	b.quiesce(ctx)
	read0 := procReadBytes(b.chPID)
	res, err := b.runSync(ctx, db, cfg, st.sim, db)
	read := procReadBytes(b.chPID) - read0
	_, _ = b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil)
	if err != nil {
		return err
	}
	if res.log.Points != res.rows || res.log.Failed != 0 || res.rows != st.want {
		return fmt.Errorf("fleetsync reported %d points (%d failed variables) and datapoints holds %d rows; the fleet holds %d", res.log.Points, res.log.Failed, res.rows, st.want)
	}
	mp := float64(res.rows) / 1e6
	f := st.figs[mode]
	f.wall.add(res.wall.Seconds())
	f.cpu.add((res.user + res.sys) / mp)
	f.chCPU.add(res.chCPU / mp)
	f.simCPU.add(res.simCPU / mp)
	f.chRead.add(read / float64(res.rows))
	b.logf("compression %s run %d: %d points in %.2fs, fleetsync CPU %.1fs, clickhouse %.1fs, fleetsim %.1fs, clickhouse read %.0f MB",
		mode, r+1, res.rows, res.wall.Seconds(), res.user+res.sys, res.chCPU, res.simCPU, read/1e6)
	return nil
}

func (st *compressionStage) finish(context.Context) {}

// procReadBytes is the rchar line of /proc/PID/io (bytes the process read
// through read-like calls, sockets included), NaN when unreadable.
func procReadBytes(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return nan
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return n
			}
		}
	}
	return nan
}
