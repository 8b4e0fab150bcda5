package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// fleetSizes are the fleets of the fleet-size section (issue 26): devices ×
// fleetVarsPerDevice variables, fleetPointsPerVar points each. -quick takes
// a tenth of each.
var fleetSizes = []int{2000, 20000}

const (
	fleetVarsPerDevice = 50
	fleetPointsPerVar  = 2
)

// metadataTables are the tables the metadata stage writes; the rows it
// writes per cycle are counted in them.
var metadataTables = []string{"devices", "variables", "device_groups", "device_group_members", "device_group_member_changes", "organizations"}

// fleetSize measures what the size of the fleet costs (issue 26): fleetsim
// serving each size of fleetSizes (devices × 50 variables, 2 points each,
// no latency), fleetsync at its defaults, a first sync into a fresh
// database and then a cycle in which nothing changed. Each is one
// `fleetsync sync` process under /usr/bin/time.
func (b *bench) fleetSize(ctx context.Context) error {
	sec := b.section(fmt.Sprintf("10. Fleet size: a first sync and an idle cycle of fleets of %s variables (%d per device, %d points each)",
		strings.Join(fleetVarCounts(b.o.quick), " and "), fleetVarsPerDevice, fleetPointsPerVar))
	sec.note("`%s sync --config FILE` under `%s` at the configuration's defaults (`source.page_size: %d`, `sync.max_in_flight: %d`, `skip_idle: true`), fleetsim (`--devices N --variables %d --points %d --span 1d`, no latency) in its own process started afresh for each size, a fresh database per run (dropped afterwards). The first sync reads every variable; the idle cycle runs right after it, against the same fleetsim, nothing written to the fleet in between, so it reads no data (every variable was read less than `idle_recheck` ago and its `lastActivity` did not move): what it costs is the walk, the metadata and the marks.",
		filepath.Join(b.o.bin, "fleetsync"), map[bool]string{true: "/usr/bin/time -v", false: "wait4 rusage"}[b.useTime], b.o.tune.PageSize, b.o.tune.MaxInFlight, fleetVarsPerDevice, fleetPointsPerVar)
	sec.note("Metadata rows written = the rows of the INSERTs into %s during the process: the sum of `rows` of the level-0 parts (written by an INSERT, not by a merge) of those tables in `system.parts` whose blocks are newer than the greatest block number before it. Merged-away parts stay listed for `old_parts_lifetime` (8 min), longer than any run here, so merges do not hide rows.",
		strings.Join(metadataTables, ", "))
	for _, devices := range fleetSizes {
		if b.o.quick {
			devices /= 10
		}
		if b.o.fleetMax > 0 && devices*fleetVarsPerDevice > b.o.fleetMax {
			continue
		}
		if err := b.fleetSizeOne(ctx, sec, devices); err != nil {
			return err
		}
	}
	return nil
}

// fleetVarCounts names the variable counts of the section's fleets.
func fleetVarCounts(quick bool) []string {
	var out []string
	for _, d := range fleetSizes {
		if quick {
			d /= 10
		}
		out = append(out, fmt.Sprintf("%d", d*fleetVarsPerDevice))
	}
	return out
}

// fleetSizeOne measures one fleet size, -runs times.
func (b *bench) fleetSizeOne(ctx context.Context, sec *section, devices int) error {
	nvars := devices * fleetVarsPerDevice
	b.sim.stop()
	b.sim = nil
	sim, err := startSim(ctx, filepath.Join(b.o.bin, "fleetsim"), simArgs(devices, fleetVarsPerDevice, fleetPointsPerVar, "1d")...)
	if err != nil {
		return err
	}
	defer sim.stop()
	b.logf("fleetsim pid %d on %s: %d devices × %d variables × %d points", sim.pid(), sim.url, devices, fleetVarsPerDevice, fleetPointsPerVar)
	tag := fmt.Sprintf("%d variables", nvars)
	key := strconv.Itoa(nvars)
	type cycleFigs struct{ wall, rss, cpu, simCPU, chCPU, meta, metaDV *figure }
	figs := func(name, keyName string) cycleFigs {
		return cycleFigs{
			wall:   sec.fig("fleet-wall-"+keyName+"-"+key, tag+", "+name+": wall time of `fleetsync sync`", "s", 1),
			rss:    sec.fig("fleet-rss-"+keyName+"-"+key, tag+", "+name+": peak RSS of fleetsync", "MiB", 0),
			cpu:    sec.fig("fleet-cpu-"+keyName+"-"+key, tag+", "+name+": fleetsync CPU (user+sys)", "CPU-s", 1),
			simCPU: sec.fig("", tag+", "+name+": fleetsim CPU meanwhile", "CPU-s", 1),
			chCPU:  sec.fig("", tag+", "+name+": clickhouse-server CPU meanwhile", "CPU-s", 1),
			meta:   sec.fig("fleet-meta-"+keyName+"-"+key, tag+", "+name+": metadata rows written", "rows", 0),
			metaDV: sec.fig("", tag+", "+name+": of which devices and variables", "rows", 0),
		}
	}
	first, idle := figs("first sync", "first"), figs("idle cycle", "idle")
	for r := range b.o.runs {
		db := fmt.Sprintf("bench_fleet_%d_%d", nvars, r+1)
		cfg := filepath.Join(b.dir, db+".yaml")
		if err := b.syncConfig(cfg, sim.url, db, b.o.tune.RowsPerRequest); err != nil {
			return err
		}
		run := func(name string, f cycleFigs) (syncResult, error) {
			// The database does not exist before the first sync: no
			// table, nothing written yet.
			before, _ := b.metadataBlocks(ctx, db)
			b.quiesce(ctx)
			res, err := b.runSync(ctx, db+"-"+name, cfg, sim, db)
			if err != nil {
				return res, fmt.Errorf("%s, %s: %w", tag, name, err)
			}
			all, dv, err := b.metadataRowsSince(ctx, db, before)
			if err != nil {
				return res, err
			}
			f.wall.add(res.wall.Seconds())
			f.rss.add(float64(res.maxRSS) / (1 << 20))
			f.cpu.add(res.user + res.sys)
			f.simCPU.add(res.simCPU)
			f.chCPU.add(res.chCPU)
			f.meta.add(float64(all))
			f.metaDV.add(float64(dv))
			b.logf("fleet %s run %d %s: %.1fs, peak RSS %.0f MiB, CPU %.1fs user + %.1fs sys (fleetsim %.1fs, clickhouse %.1fs), %d variables read, %d points, %d metadata rows (%d devices and variables)",
				tag, r+1, name, res.wall.Seconds(), float64(res.maxRSS)/(1<<20), res.user, res.sys, res.simCPU, res.chCPU, res.log.Read, res.log.Points, all, dv)
			return res, nil
		}
		err := func() error {
			defer b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil)
			res, err := run("first", first)
			if err != nil {
				return err
			}
			// The one variable fleetsim leaves empty holds no points.
			if want := int64(nvars-1) * fleetPointsPerVar; res.rows != want {
				return fmt.Errorf("%s, first sync: %d rows in datapoints FINAL, want %d", tag, res.rows, want)
			}
			res, err = run("idle", idle)
			if err != nil {
				return err
			}
			if res.log.Read != 0 {
				return fmt.Errorf("%s, idle cycle: read %d variables, want 0 (nothing changed)", tag, res.log.Read)
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// metadataBlocks is the greatest block number of each metadata table of
// db (none before the database exists).
func (b *bench) metadataBlocks(ctx context.Context, db string) (map[string]int64, error) {
	out, err := b.chClient(ctx, fmt.Sprintf("SELECT table, max(max_block_number) FROM system.parts WHERE database = '%s' AND table IN ('%s') GROUP BY table FORMAT TSV",
		db, strings.Join(metadataTables, "','")), nil, nil)
	if err != nil {
		return nil, err
	}
	blocks := map[string]int64{}
	for _, l := range strings.Split(out, "\n") {
		t, v, ok := strings.Cut(l, "\t")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("block numbers of %s.%s: %q: %w", db, t, v, err)
		}
		blocks[t] = n
	}
	return blocks, nil
}

// metadataRowsSince sums the rows INSERTs wrote into db's metadata tables
// in blocks after before's: all of them, and those of devices and
// variables.
func (b *bench) metadataRowsSince(ctx context.Context, db string, before map[string]int64) (all, devVars int64, err error) {
	for _, t := range metadataTables {
		out, err := b.chClient(ctx, fmt.Sprintf("SELECT sum(rows) FROM system.parts WHERE database = '%s' AND table = '%s' AND level = 0 AND min_block_number > %d",
			db, t, before[t]), nil, nil)
		if err != nil {
			return 0, 0, err
		}
		n, err := strconv.ParseInt(out, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("rows written into %s.%s: %q: %w", db, t, out, err)
		}
		all += n
		if t == "devices" || t == "variables" {
			devVars += n
		}
	}
	return all, devVars, nil
}
