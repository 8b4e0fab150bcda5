package main

import (
	"context"
	"fmt"
	"path/filepath"
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
	wall, cpu, chCPU, simCPU *figure
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
	st.figs = map[string]*compressionFigures{}
	for _, m := range compressionModes {
		st.figs[m] = &compressionFigures{
			wall:   st.sec.fig("", "wall time, compression "+m, "s", 2),
			cpu:    st.sec.fig("", "fleetsync CPU per million points, compression "+m, "CPU-s", 2),
			chCPU:  st.sec.fig("", "clickhouse-server CPU per million points, compression "+m, "CPU-s", 2),
			simCPU: st.sec.fig("", "fleetsim CPU per million points, compression "+m, "CPU-s", 2),
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
	if err := b.writeConfig(cfg, st.sim.url, db, configLines{clickhouse: "  compression: " + mode + "\n"}); err != nil {
		return err
	}
	b.quiesce(ctx)
	res, err := b.runSync(ctx, db, cfg, st.sim, db)
	mp, err := b.settle(ctx, db, res, err, st.want)
	if err != nil {
		return err
	}
	f := st.figs[mode]
	f.wall.add(res.wall.Seconds())
	f.cpu.add((res.user + res.sys) / mp)
	f.chCPU.add(res.chCPU / mp)
	f.simCPU.add(res.simCPU / mp)
	b.logf("compression %s run %d: %d points in %.2fs (%d requests, %d splits), fleetsync CPU %.1fs, clickhouse %.1fs, fleetsim %.1fs",
		mode, r+1, res.rows, res.wall.Seconds(), res.log.Requests, res.log.Splits, res.user+res.sys, res.chCPU, res.simCPU)
	return nil
}

func (st *compressionStage) finish(context.Context) {}

// settle ends a backfill into db: it drops the database, then returns err,
// what the backfill ran into, or else whether it loaded exactly want points
// (exact), and the millions of points it loaded.
func (b *bench) settle(ctx context.Context, db string, res syncResult, err error, want int64) (mp float64, _ error) {
	_, _ = b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil)
	if err != nil {
		return 0, err
	}
	if err := res.exact(want); err != nil {
		return 0, err
	}
	return float64(res.rows) / 1e6, nil
}

// exact checks that a backfill loaded the whole fleet, want points: what
// fleetsync reported, what datapoints holds and the fleet all agree.
func (r syncResult) exact(want int64) error {
	if r.log.Points-r.log.Reloaded != r.rows || r.log.Failed != 0 || r.rows != want {
		return fmt.Errorf("fleetsync reported %d points (%d of them loaded again, %d failed variables) and datapoints FINAL holds %d rows; the fleet holds %d",
			r.log.Points, r.log.Reloaded, r.log.Failed, r.rows, want)
	}
	return nil
}
