package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// idleSchedule scales the defaults (sync.idle_recheck 1h, a cycle every
// 5 min: 12 cycles per recheck period) down to seconds, so that a whole
// period fits in the benchmark. The share of the fleet due in a cycle
// depends only on that ratio, so the per-cycle figures are the defaults'.
type idleSchedule struct {
	recheck, interval time.Duration
	// periods is how many recheck periods the "after" run lasts; the
	// first is reported apart, because right after a full sync no
	// variable is due before half a period.
	periods int
}

func (s idleSchedule) cyclesPerPeriod() int { return int(s.recheck / s.interval) }

// idleFleet measures what the idle-recheck costs a fleet where nothing
// changes (issue 11): before, a cycle trusted an unchanged lastActivity for
// ever and read nothing, which lost late points on a service whose
// lastActivity a late point does not move; now every variable is re-read
// within idle_recheck, spread so that each cycle reads a slice of the fleet.
func (b *bench) idleFleet(ctx context.Context) error {
	sim, ctl, nvars, err := b.startIncrFleet(ctx)
	if err != nil {
		return err
	}
	defer sim.stop()
	sch := idleSchedule{recheck: 30 * time.Second, interval: 2500 * time.Millisecond, periods: 3}
	if b.o.quick {
		sch = idleSchedule{recheck: 12 * time.Second, interval: time.Second, periods: 2}
	}
	perPeriod := sch.cyclesPerPeriod()
	later := fmt.Sprintf("periods 2–%d", sch.periods)
	if sch.periods == 2 {
		later = "period 2"
	}

	sec := b.section(fmt.Sprintf("6. Idle fleet: what re-reading idle variables costs, %d variables where nothing changes", nvars))
	const db = "bench_idle"
	defer b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil)
	config := func(name string, lines ...string) (string, error) {
		p := filepath.Join(b.dir, db+"-"+name+".yaml")
		return p, b.syncConfig(p, sim.url, db, b.o.tune.RowsPerRequest, lines...)
	}
	defaults, err := config("default")
	if err != nil {
		return err
	}
	// reloaded counts the points re-read: a re-read covers the variable's
	// lookback, whose points are loaded again and deduplicated by the table.
	var reloaded int64
	// cycle runs one `fleetsync sync` and returns its data and list
	// requests and the variables it read.
	cycle := func(name, cfg string) (data, list, read int, err error) {
		res, c, err := b.countedSync(ctx, name, cfg, sim, ctl, db)
		if err != nil {
			return 0, 0, 0, err
		}
		reloaded += res.log.Points
		return c.data, c.list, res.log.Read, nil
	}
	// cycles runs n cycles, one every sch.interval (start to start), and
	// returns each one's data requests and variables read.
	cycles := func(name, cfg string, n int) (data, read []int, err error) {
		next := time.Now()
		for i := range n {
			if d := time.Until(next); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				}
			}
			next = next.Add(sch.interval)
			dr, _, r, err := cycle(fmt.Sprintf("%s-%d", name, i+1), cfg)
			if err != nil {
				return nil, nil, err
			}
			data, read = append(data, dr), append(read, r)
		}
		return data, read, nil
	}

	first, fc, err := b.countedSync(ctx, "idle-first", defaults, sim, ctl, db)
	if err != nil {
		return err
	}
	b.logf("first sync: %d points, %d data and %d list requests", first.rows, fc.data, fc.list)

	nextData, nextList, _, err := cycle("idle-next", defaults)
	if err != nil {
		return err
	}
	sec.fig("idle-next-data", "the cycle right after a sync, defaults: data requests", "requests", 0).add(float64(nextData))
	sec.fig("", "the cycle right after a sync, defaults: list requests", "requests", 0).add(float64(nextList))
	b.logf("idle cycle right after the first sync: %d data and %d list requests", nextData, nextList)

	// After: the recheck scaled down, from right after a full sync.
	after, err := config("after", fmt.Sprintf("idle_recheck: %s", sch.recheck))
	if err != nil {
		return err
	}
	data, read, err := cycles("idle-after", after, sch.periods*perPeriod)
	if err != nil {
		return err
	}
	b.logf("after, data requests per cycle: %v; variables read: %v", data, read)
	firstData := sec.fig("", fmt.Sprintf("after, first period following a full sync: data requests per cycle (%d cycles)", perPeriod), "requests", 0)
	steadyData := sec.fig("", fmt.Sprintf("after, %s: data requests per cycle (%d cycles)", later, (sch.periods-1)*perPeriod), "requests", 0)
	steadyRead := sec.fig("", fmt.Sprintf("after, %s: variables read per cycle", later), "variables", 0)
	var firstSum, steadySum int
	for i := range data {
		if i < perPeriod {
			firstData.add(float64(data[i]))
			firstSum += data[i]
			continue
		}
		steadyData.add(float64(data[i]))
		steadyRead.add(float64(read[i]))
		steadySum += data[i]
	}
	steadyMean := float64(steadySum) / float64(len(data)-perPeriod)
	sec.fig("idle-period-mean", fmt.Sprintf("after, %s: mean data requests per cycle", later), "requests", 1).add(steadyMean)
	sec.fig("", "after, first period: mean data requests per cycle", "requests", 1).add(float64(firstSum) / float64(perPeriod))

	// Before: lastActivity trusted for ever, as the code did until issue
	// 11; an idle_recheck far beyond the run has the same effect.
	before, err := config("before", "idle_recheck: 100000h")
	if err != nil {
		return err
	}
	bdata, _, err := cycles("idle-before", before, perPeriod)
	if err != nil {
		return err
	}
	beforeData := sec.fig("", fmt.Sprintf("before (lastActivity trusted for ever): data requests per cycle (%d cycles)", perPeriod), "requests", 0)
	for _, d := range bdata {
		beforeData.add(float64(d))
	}

	// Reference: no skipping at all.
	all, err := config("all", "skip_idle: false")
	if err != nil {
		return err
	}
	adata, _, err := cycles("idle-all", all, 3)
	if err != nil {
		return err
	}
	allData := sec.fig("idle-all-data", "reference, skip_idle: false: data requests per cycle (3 cycles)", "requests", 0)
	for _, d := range adata {
		allData.add(float64(d))
	}

	t := b.o.tune
	sec.note("Configuration: the backfills' (`variables_per_request: %d`, `max_in_flight: %d`, `source.page_size: %d`), `skip_idle: true` (the default) and, for \"after\", `idle_recheck: %s` with a cycle every %s (start to start). The defaults (`idle_recheck: 1h`, `schedule: */5 * * * *`) have the same %d cycles per recheck period; the share of the fleet due in a cycle depends only on that ratio (each variable is re-read once a recheck period, at its slot's phase, the slots spread over the period), so the per-cycle figures are what the defaults cost every 5 minutes. \"The cycle right after a sync\" runs the defaults as they are.",
		t.VariablesPerRequest, t.MaxInFlight, t.PageSize, sch.recheck, sch.interval, perPeriod)
	sec.note("The first sync loaded %d points with %d data and %d list requests. Nothing is written to the fleet afterwards. A re-read covers the variable's `lookback`, so its points there are loaded again (%d in all the cycles below) and deduplicated by the table. \"Before\" emulates the code before issue 11, which trusted an unchanged `lastActivity` for ever, with `idle_recheck: 100000h`: it read nothing, and so lost the late points of a service whose `lastActivity` a late point does not move. Requests counted by fleetsim, reset before each cycle; data = Data API (`/api/v1.6/…`).",
		first.rows, fc.data, fc.list, reloaded)
	sec.note("Data requests per cycle, in order: after %v; before %v; skip_idle: false %v.", data, bdata, adata)
	return nil
}
