package main

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The steady-state section (issue 37): the real `fleetsync run` daemon
// against fleetsim while live writers add points, at the defaults'
// schedule, lookback and idle_recheck scaled down, for a few recheck
// periods; what a cycle costs per new point, and how fresh the points are.

// Default sync timing the section scales down: a cycle every 5 minutes,
// lookback and idle_recheck 1 hour, so 12 cycles per lookback.
const (
	defaultPeriod       = 5 * time.Minute
	periodsPerLookback  = 12
	steadyDefaultScale  = 60
	steadyDefaultLength = 2 // recheck periods of live writing per shape
)

// steadyShape is one fleet of the section.
type steadyShape struct {
	// key names the database and the figures; title the table's columns
	// (no colon: it would cut the figures' names).
	key, title string
	// The generated fleet: devices × vars variables, points each over
	// span (a fleetsim --span).
	devices, vars, points int
	span                  string
	// silent variables are added with no points at all, once ones get a
	// single point during the run, spread over it.
	silent, once int
	// perSecond new points a second go to random variables of the
	// generated fleet; when 0, share of them per period instead.
	perSecond float64
	share     float64
}

// steadyOptions are the section's timing and fleets.
type steadyOptions struct {
	// period is the scaled schedule (`@every period`); lookback and
	// idle_recheck are periodsPerLookback of it.
	period time.Duration
	// length is how long the writers write, in recheck periods.
	length float64
	shapes []steadyShape
}

func (so steadyOptions) recheck() time.Duration { return periodsPerLookback * so.period }
func (so steadyOptions) scale() float64         { return float64(defaultPeriod) / float64(so.period) }

// Live writers' mix: a fifth of the points late, one in twenty ahead.
const (
	steadyLateShare  = 0.2
	steadyAheadShare = 0.05
)

// steadyShapes are the two fleets: 24 variables with a dense
// history (about 40 new points a second), and 10,000 variables of which
// 10 % report each cycle; quick divides the second by ten.
func steadyShapes(quick bool) []steadyShape {
	wide := steadyShape{key: "wide", title: "10,000 (10 % a cycle)", devices: 2490, vars: 4, points: 20, span: "1d", silent: 20, once: 20, share: 0.1}
	if quick {
		wide = steadyShape{key: "wide", title: "1,000 (10 % a cycle)", devices: 245, vars: 4, points: 20, span: "1d", silent: 10, once: 10, share: 0.1}
	}
	return []steadyShape{
		{key: "dense", title: "24 dense", devices: 5, vars: 4, points: 20000, span: "1d", silent: 2, once: 2, perSecond: 40},
		wide,
	}
}

// steadyResult is what the targets read of one shape's run.
type steadyResult struct {
	shape            steadyShape
	period, recheck  time.Duration
	cycles           int
	loaded, served   float64 // per new point
	list, listPages  float64 // list requests per cycle; device and variable pages
	data, count      float64 // per cycle
	onTimeP99        float64
	lateMax          float64
	unseen           int
	landed, expected int64
	// written and seen count the points by class: written by the writers,
	// and seen in datapoints by the freshness poll.
	written, seen [numClasses]int
}

// steadyState runs the section on each shape.
func (b *bench) steadyState(ctx context.Context) error {
	so := b.o.steady
	lookback := so.recheck()
	sec := b.section(fmt.Sprintf("11. Steady state: `fleetsync run` on a live fleet, the defaults' timing scaled down %.0f× (`@every %s`, `lookback`, `idle_recheck` and `metadata_refresh`: %s)",
		so.scale(), so.period, lookback))
	if b.tuned() {
		t := b.o.tune
		sec.note("**Tuned:** not the defaults (`rows_per_request: %d`, `variables_per_request: %d`, `max_in_flight: %d`, `batch_rows: %d`, `insert_workers: %d`, `source.page_size: %d`); the reference figures are a run without tuning flags.",
			t.RowsPerRequest, t.VariablesPerRequest, t.MaxInFlight, t.BatchRows, t.InsertWorkers, t.PageSize)
	}
	sec.note("The daemon (`%s run`) runs with the configuration's defaults but for `schedule: \"@every %s\"` and `lookback`, `idle_recheck` and `metadata_refresh` at %s: the defaults (5 min, 1 h, 1 h, 1 h) divided by %.0f (`-steady-scale`), the same 12 cycles per lookback and per recheck period; one run per fleet (`-runs` does not repeat it: a run takes minutes). Its first cycle (the first sync) reads the generated history before any writer starts; then writers post a batch a second to fleetsim (`POST /_sim/points`) for %.1f recheck periods: %.0f %% of the points late (stamped behind an on-time point of the last lookback, at most a lookback less 1 s behind the write, so inside the lookback of any mark in force), %.0f %% ahead (up to a period ahead of the write), the rest on time; beside them variables with no points at all and variables that report once (one point each, spread over the run). The cycles are measured in two phases: those that begin in the first recheck period after the first sync, which read each variable for the first time since, and the steady state after it, through the first cycle that begins after the writers stop; a point counts in the phase of the first cycle that begins after its write; per cycle = over the phase's cycles. The counters are read at the end of each cycle: fleetsim's requests (`/_sim/counters`: data = `POST …/data/raw/series`, count = `POST …/data/stats/aggregation/`, lists = `/api/v2.0/…`) and the points its raw-series responses carried (`/_sim/served`), fleetsync's `/metrics` (`fleetsync_points_loaded_total`, `fleetsync_rows_inserted_total`), the CPU of fleetsync and clickhouse-server from `/proc` (the server's less what the freshness poll alone costs it, measured after the run).",
		filepath.Join(b.o.bin, "fleetsync"), so.period, lookback, so.scale(), so.length, 100*steadyLateShare, 100*steadyAheadShare)
	sec.note("Freshness = from fleetsim's acknowledgement of the write to the first poll that sees the point in `datapoints` (`SELECT variable_id, ts_ms … WHERE version > ` the previous poll's start less a margin, every %s, so within a poll's interval); an ahead point's is counted from its timestamp. Duplicates = `count() - count() FINAL` of `datapoints` right after the window (merges meanwhile remove some). Afterwards every written point is checked to be in `datapoints FINAL` exactly once (the count after the first sync + the points written).",
		pollEvery(so.period))
	for _, sh := range so.shapes {
		if err := b.steadyRun(ctx, sec, sh); err != nil {
			return fmt.Errorf("%s: %w", sh.title, err)
		}
	}
	return nil
}

// perSecondOf is the points a second the writers write to sh's fleet.
func perSecondOf(sh steadyShape, fleet simFleet, period time.Duration) float64 {
	if sh.perSecond > 0 {
		return sh.perSecond
	}
	return sh.share * float64(len(fleet.active)) / period.Seconds()
}

// pollEvery is the freshness poll's interval for a schedule period.
func pollEvery(period time.Duration) time.Duration {
	return min(max(period/20, 100*time.Millisecond), 250*time.Millisecond)
}

// simFleet is the fleet a fleetsim serves, as the section sees it.
type simFleet struct {
	devices, variables int
	// active are the generated variables with points; silent and once
	// the added ones.
	active, silent, once []string
	// startMs is fleetsim's start: no generated point is newer.
	startMs int64
}

// prepareFleet adds the silent and report-once variables to fleetsim's
// generated fleet and lists it.
func prepareFleet(ctx context.Context, ctl *simControl, sh steadyShape) (simFleet, error) {
	var f simFleet
	type variable struct {
		ID             string `json:"id"`
		LastActivityMs int64  `json:"last_activity_ms"`
	}
	type device struct {
		ID        string     `json:"id"`
		Label     string     `json:"label"`
		Variables []variable `json:"variables"`
	}
	for _, add := range []struct {
		label string
		n     int
	}{{"steady-silent", sh.silent}, {"steady-once", sh.once}} {
		if add.n == 0 {
			continue
		}
		if err := ctl.do(ctx, http.MethodPost, "/_sim/devices", map[string]any{"label": add.label, "variables": add.n}, nil); err != nil {
			return f, err
		}
	}
	var devices []device
	if err := ctl.do(ctx, http.MethodGet, "/_sim/devices", nil, &devices); err != nil {
		return f, err
	}
	for _, d := range devices {
		f.devices++
		for _, v := range d.Variables {
			f.variables++
			switch {
			case d.Label == "steady-silent":
				f.silent = append(f.silent, v.ID)
			case d.Label == "steady-once":
				f.once = append(f.once, v.ID)
			case v.LastActivityMs > 0:
				f.active = append(f.active, v.ID)
			}
		}
	}
	var info struct {
		StartMs int64 `json:"start_ms"`
	}
	if err := ctl.do(ctx, http.MethodGet, "/_sim/info", nil, &info); err != nil {
		return f, err
	}
	f.startMs = info.StartMs
	if len(f.active) == 0 {
		return f, fmt.Errorf("fleetsim lists no variable with points")
	}
	return f, nil
}

// steadyRun measures one shape: a fleetsim of its own, a fresh database,
// the daemon's first sync, then live writers for the run's length, and the
// points they wrote left to land.
func (b *bench) steadyRun(ctx context.Context, sec *section, sh steadyShape) error {
	so := b.o.steady
	period, recheck := so.period, so.recheck()
	b.sim.stop()
	b.sim = nil
	sim, err := startSim(ctx, filepath.Join(b.o.bin, "fleetsim"), simArgs(sh.devices, sh.vars, sh.points, sh.span)...)
	if err != nil {
		return err
	}
	defer sim.stop()
	ctl := &simControl{base: sim.url, hc: &http.Client{Timeout: time.Minute}}
	fleet, err := prepareFleet(ctx, ctl, sh)
	if err != nil {
		return err
	}
	b.logf("steady %s: fleetsim pid %d on %s, %d devices, %d variables (%d with points, %d silent, %d reporting once)",
		sh.key, sim.pid(), sim.url, fleet.devices, fleet.variables, len(fleet.active), len(fleet.silent), len(fleet.once))

	db := "bench_steady_" + sh.key
	cfg := filepath.Join(b.dir, db+".yaml")
	if err := b.syncConfig(cfg, sim.url, db, b.o.tune.RowsPerRequest,
		fmt.Sprintf("schedule: \"@every %s\"", period), fmt.Sprintf("lookback: %s", recheck), fmt.Sprintf("idle_recheck: %s", recheck),
		// The default metadata_refresh is the default idle_recheck (1 h):
		// scaled with it, so the group and organization lists a real
		// hour makes are counted.
		fmt.Sprintf("metadata_refresh: %s", recheck)); err != nil {
		return err
	}
	_, _ = b.chClient(ctx, "DROP DATABASE IF EXISTS "+db, nil, nil)
	defer b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil)
	conn, err := openPollConn(b.ch.Addr())
	if err != nil {
		return err
	}
	defer conn.Close()
	table := db + ".datapoints"
	countOf := func(q string) (int64, error) {
		var n uint64
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
		return int64(n), nil
	}

	b.quiesce(ctx)
	if err := ctl.reset(ctx); err != nil {
		return err
	}
	snap := func(pid int, metricsURL string) snapshot {
		return takeSnapshot(ctx, ctl, metricsURL, pid, b.chPID, sim.pid())
	}
	base := snap(-1, "")
	if base.err != nil {
		return base.err
	}
	d, err := startDaemon(filepath.Join(b.o.bin, "fleetsync"), cfg, filepath.Join(b.dir, db+".log"), snap)
	if err != nil {
		return err
	}
	defer d.stop()
	first, err := d.nextCycle(ctx, 10*time.Minute)
	if err != nil {
		return fmt.Errorf("first sync: %w", err)
	}
	if first.failed {
		return fmt.Errorf("first sync failed: %s", tail(d.logPath, 1500))
	}
	history, err := countOf("SELECT count() FROM " + table + " FINAL")
	if err != nil {
		return err
	}
	b.logf("steady %s: first sync %.1fs, %d points, %d rows served", sh.key, first.log.Duration, history, first.served-base.served)
	fr := requestsBetween(base, first)
	sec.note("**%s** (%d devices, %d variables: %d with a generated history of %d points over %s, %d silent, %d reporting once; %.0f new points a second): the first sync took %.1f s, %d data, %d count and %d list requests (%s), served %d rows, fleetsync %.2f CPU-s, clickhouse-server %.2f CPU-s.",
		sh.title, fleet.devices, fleet.variables, len(fleet.active), sh.points, sh.span, len(fleet.silent), len(fleet.once), perSecondOf(sh, fleet, period),
		first.log.Duration, fr["data"], fr["count"], listTotal(fr), listKindsText(fr, 1), first.served-base.served, first.syncCPU, first.chCPU-base.chCPU)

	// The writers and the freshness poll.
	perSecond := perSecondOf(sh, fleet, period)
	length := time.Duration(so.length * float64(recheck))
	rnd := rand.New(rand.NewSource(37))
	w := &liveWriter{ctl: ctl, rnd: rnd, active: fleet.active, onceVars: fleet.once, perSecond: perSecond,
		lateShare: steadyLateShare, aheadShare: steadyAheadShare, lookback: recheck, period: period, floorMs: fleet.startMs,
		pending: map[pointKey]written{}, taken: map[pointKey]bool{}}
	for i := range fleet.once {
		w.onceAt = append(w.onceAt, time.Duration((float64(i)+0.5)/float64(len(fleet.once))*float64(length)))
	}
	pctx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	overlap := max(10*time.Second, 2*period)
	poller := &visibilityPoller{conn: conn, table: table, every: pollEvery(period), overlap: overlap, w: w}
	polled := make(chan struct{})
	go func() { defer close(polled); poller.run(pctx) }()
	wctx, stopWrite := context.WithCancel(ctx)
	defer stopWrite()
	// stoppedAt is set when the writers stop, before writing closes.
	var stoppedAt time.Time
	writing := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(writing)
		w.run(wctx, began, length)
		stoppedAt = time.Now()
	}()

	// The window: every cycle that ends while the writers write, through
	// the first that begins after they stopped.
	var cycles []snapshot
	stopped := false
	cycleTimeout := max(2*time.Minute, 10*period)
	for {
		s, err := d.nextCycle(ctx, cycleTimeout)
		if err != nil {
			return err
		}
		prev := first
		if len(cycles) > 0 {
			prev = cycles[len(cycles)-1]
		}
		cycles = append(cycles, s)
		rc := requestsBetween(prev, s)
		pending, _ := w.state()
		b.logf("steady %s: cycle %d: %.2fs, %d read, %d idle, %d points loaded, %d rows served, %d data, %d count and %d list requests, %d points pending",
			sh.key, len(cycles), s.log.Duration, s.log.Read, s.log.Idle, s.log.Points, s.served-prev.served, rc["data"], rc["count"], listTotal(rc), pending)
		if !stopped {
			select {
			case <-writing:
				stopped = true
			default:
			}
		}
		if stopped && cycleStart(s).After(stoppedAt) {
			break
		}
	}
	all, err := countOf("SELECT count() FROM " + table)
	if err != nil {
		return err
	}
	final, err := countOf("SELECT count() FROM " + table + " FINAL")
	if err != nil {
		return err
	}
	dups := all - final

	// The points written last may still be on their way: cycles go on
	// until all have landed or a recheck period and three more cycles
	// have passed, which the contract's bound for late points is within.
	deadline := time.Now().Add(recheck + 3*period)
	for time.Now().Before(deadline) {
		if pending, _ := w.state(); pending == 0 {
			break
		}
		select {
		case <-d.cycles:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	d.stop()
	stopPoll()
	<-polled
	if poller.err != nil {
		return poller.err
	}
	// A last look at everything loaded since the writers began.
	if from, ok := w.oldestPending(); ok {
		if err := poller.poll(ctx, began.Add(-overlap), from, time.Now()); err != nil {
			return err
		}
	}
	if _, werr := w.state(); werr != nil {
		return werr
	}
	landed, err := countOf("SELECT count() FROM " + table + " FINAL")
	if err != nil {
		return err
	}
	// What the freshness poll alone costs the server: the same poll with
	// nothing loading, after merges settle.
	b.quiesce(ctx)
	baseline := b.pollCost(ctx, poller, recheck, 3*time.Second)

	// The phases: the cycles that begin in the first recheck period after
	// the first sync, which read each variable for the first time since,
	// and the steady state after it (the whole run when it lasts a period
	// or less). A point belongs to the phase of the first cycle that
	// begins after its write: the points written before the last cycle
	// of the first period began are that period's.
	far := time.Now().Add(time.Hour)
	type phase struct {
		name        string
		from, to    snapshot
		n           int
		since, till time.Time
	}
	split := 0
	if so.length > 1 {
		for split < len(cycles) && cycleStart(cycles[split]).Before(began.Add(recheck)) {
			split++
		}
	}
	var phases []phase
	if split > 0 && split < len(cycles) {
		phases = append(phases, phase{name: "first recheck period", from: first, to: cycles[split-1], n: split, since: began, till: cycleStart(cycles[split-1])})
	} else {
		split = 0
	}
	phases = append(phases, phase{name: "steady", from: first, to: cycles[len(cycles)-1], n: len(cycles) - split, since: began, till: far})
	if split > 0 {
		phases[1].from, phases[1].since = cycles[split-1], phases[0].till
	}
	pagesOf := func(n int) float64 { return math.Ceil(float64(n) / float64(b.o.tune.PageSize)) }
	pages := pagesOf(fleet.devices) + pagesOf(fleet.variables)
	var res steadyResult
	for _, ph := range phases {
		counts := w.writtenBetween(ph.since, ph.till)
		newPoints := 0
		for _, c := range counts {
			newPoints += c
		}
		if newPoints == 0 || ph.n == 0 {
			return fmt.Errorf("%s: %d cycles, %d points written: nothing to measure", ph.name, ph.n, newPoints)
		}
		n, np := float64(ph.n), float64(newPoints)
		from, to := ph.from, ph.to
		win := requestsBetween(from, to)
		chCPU := to.chCPU - from.chCPU - baseline*to.at.Sub(from.at).Seconds()
		series := sh.title + ", " + ph.name
		steady := ph.name == "steady"
		fig := func(key, name, unit string, digits int, v float64) {
			if key != "" && steady {
				key = "steady-" + sh.key + "-" + key
			} else {
				key = ""
			}
			sec.fig(key, series+": "+name, unit, digits).add(v)
		}
		fresh := func(c pointClass) []float64 { return w.freshnessBetween(c, ph.since, ph.till) }
		onT, lateF, aheadF, onceF := fresh(onTime), fresh(late), fresh(ahead), fresh(once)
		loaded := metricBetween(from, to, "fleetsync_points_loaded_total")
		inserted := metricBetween(from, to, `fleetsync_rows_inserted_total{table="datapoints"}`)
		meta := metricBetween(from, to, `fleetsync_rows_inserted_total{table="devices"}`) + metricBetween(from, to, `fleetsync_rows_inserted_total{table="variables"}`)
		r := steadyResult{shape: sh, period: period, recheck: recheck, cycles: ph.n,
			loaded: loaded / np, served: float64(to.served-from.served) / np, list: float64(listTotal(win)) / n, listPages: pages,
			data: float64(win["data"]) / n, count: float64(win["count"]) / n,
			onTimeP99: quantile(onT, 0.99), lateMax: quantile(lateF, 1)}
		fig("data", "data requests (raw series) per cycle; later, with the counts, ≤ 1.1 × today's", "requests", 1, r.data)
		fig("count", "count requests (aggregation) per cycle", "requests", 2, r.count)
		fig("list", fmt.Sprintf("list requests per cycle (%s); bound: the device and variable pages + 10 %%", strings.Join(listKinds[:4], ", ")), "requests", 1, r.list)
		fig("served", "rows served per new point; bound ≤ 3", "rows", 1, r.served)
		fig("loaded", "points loaded per new point; bound ≤ 1.5", "points", 2, r.loaded)
		fig("", "rows inserted into datapoints per new point", "rows", 2, inserted/np)
		fig("", "rows inserted into devices and variables per cycle", "rows", 1, meta/n)
		fig("", "fleetsync CPU per new point", "CPU-ms", 3, 1000*(to.syncCPU-from.syncCPU)/np)
		fig("", "clickhouse-server CPU per new point", "CPU-ms", 3, 1000*chCPU/np)
		fig("", "freshness, on time: p50", "s", 1, quantile(onT, 0.5))
		fig("ontime-p99", "freshness, on time: p99; bound one period + 2 s", "s", 1, r.onTimeP99)
		fig("", "freshness, late: p50", "s", 1, quantile(lateF, 0.5))
		fig("", "freshness, late: p99; bound idle_recheck + one period (on the max: see Targets)", "s", 1, quantile(lateF, 0.99))
		fig("", "freshness, ahead (from the timestamp): p99", "s", 1, quantile(aheadF, 0.99))
		if !steady {
			sec.note("**%s, %s:** %d cycles, %d new points (%s; the report-once ones seen within %.1f s); list requests per cycle by kind: %s. %s",
				sh.title, ph.name, ph.n, newPoints, classCounts(counts), quantile(onceF, 1), listKindsText(win, n), costliest(from, cycles[:split], 1, 2))
			continue
		}
		fig("dups", "duplicates left without FINAL at the end", "rows", 0, float64(dups))
		res = r
		sec.note("**%s, steady:** %d cycles, %d new points (%s; the report-once ones seen within %.1f s); list requests per cycle by kind: %s; the device and variable pages are %.0f. %s",
			sh.title, ph.n, newPoints, classCounts(counts), quantile(onceF, 1), listKindsText(win, n), pages, costliest(from, cycles[split:], split+1, 2))
		b.logf("steady %s, %s: %d cycles, %d new points, per cycle %.1f data, %.2f count, %.1f list requests; per new point %.1f rows served, %.2f points loaded; on-time p99 %.1fs, late max %.1fs",
			sh.key, ph.name, ph.n, newPoints, r.data, r.count, r.list, r.served, r.loaded, r.onTimeP99, r.lateMax)
	}
	total := w.writtenBetween(began, far)
	unseen := w.unseen()
	res.landed = landed
	for c := range numClasses {
		res.expected += int64(total[c])
		res.unseen += unseen[c]
		res.written[c] = total[c]
		res.seen[c] = len(w.freshnessBetween(pointClass(c), began, far))
	}
	res.expected += history
	b.steady = append(b.steady, res)

	if res.unseen > 0 || landed != res.expected {
		sec.note("**%s: not every point landed.** Unseen after the drain: %s; `datapoints FINAL` holds %d rows, the first sync's %d + the %d written would be %d.",
			sh.title, classCounts(unseen), landed, history, res.expected-history, res.expected)
	}
	var byTable []string
	for k, v := range cycles[len(cycles)-1].metrics {
		if t, ok := strings.CutPrefix(k, "fleetsync_rows_inserted_total{table=\""); ok {
			byTable = append(byTable, fmt.Sprintf("%s %.0f", strings.TrimSuffix(t, "\"}"), v-first.metrics[k]))
		}
	}
	slices.Sort(byTable)
	b.logf("steady %s: rows inserted by table after the first sync: %s; %d unseen; FINAL %d (want %d); poller %d polls, %d rows, alone %.3f CPU-s/s",
		sh.key, strings.Join(byTable, ", "), res.unseen, landed, res.expected, poller.polls, poller.rows, baseline)
	return nil
}

// cycleStart is when the cycle that ended at s began.
func cycleStart(s snapshot) time.Time {
	return s.at.Add(-time.Duration(s.log.Duration * float64(time.Second)))
}

// pollCost is the clickhouse-server CPU a second the freshness poll costs
// alone, over d, asking for the points of the last lookback.
func (b *bench) pollCost(ctx context.Context, p *visibilityPoller, lookback, d time.Duration) float64 {
	m := startCPU(b.chPID)
	began := time.Now()
	for time.Since(began) < d && ctx.Err() == nil {
		sent := time.Now()
		_ = p.poll(ctx, sent.Add(-p.overlap), sent.Add(-lookback).UnixMilli(), sent)
		time.Sleep(p.every - time.Since(sent))
	}
	return m.stop() / time.Since(began).Seconds()
}

// listTotal sums the list requests of a count by kind.
func listTotal(m map[string]int) int {
	n := 0
	for _, k := range listKinds {
		n += m[k]
	}
	return n
}

// listKindsText lists the list requests by kind, divided by per.
func listKindsText(m map[string]int, per float64) string {
	var parts []string
	for _, k := range listKinds {
		if v := float64(m[k]) / per; v > 0 || k != "other lists" {
			parts = append(parts, fmt.Sprintf("%s %s", k, trimFloat(v)))
		}
	}
	return strings.Join(parts, ", ")
}

// trimFloat formats v with up to two decimals, none when whole.
func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(fmt.Sprintf("%.2f", v), "0")
}

// classCounts names the points of each class.
func classCounts(c [numClasses]int) string {
	var parts []string
	for i, n := range c {
		parts = append(parts, fmt.Sprintf("%d %s", n, classNames[i]))
	}
	return strings.Join(parts, ", ")
}

// costliest describes the k cycles of cycles (numbered from first on,
// the one before them ending at prev) that served the most rows.
func costliest(prev snapshot, cycles []snapshot, first, k int) string {
	type cyc struct {
		i      int
		served int64
		s      snapshot
	}
	var cs []cyc
	for i, s := range cycles {
		cs = append(cs, cyc{first + i, s.served - prev.served, s})
		prev = s
	}
	slices.SortStableFunc(cs, func(a, b cyc) int { return int(b.served - a.served) })
	var parts []string
	for _, c := range cs[:min(k, len(cs))] {
		parts = append(parts, fmt.Sprintf("cycle %d served %d rows (%d variables read, %d idle, %d points loaded)", c.i, c.served, c.s.log.Read, c.s.log.Idle, c.s.log.Points))
	}
	return "Costliest: " + strings.Join(parts, "; ") + "."
}

// steadyTargets are issue 37's bounds on the steady state, each over every
// shape measured: the worst shape decides.
// steadyDataBefore is each shape's data requests per cycle in the steady
// phase before issue 37 (at 0b03474, where every cycle read each variable
// it read from its lookback; docs/benchmarks.md, "The steady state"),
// which the issue bounds the cycles by.
var steadyDataBefore = map[string]float64{"dense": 1.5, "wide": 32.5}

func (b *bench) steadyTargets() []target {
	if len(b.steady) == 0 {
		return nil
	}
	var ts []target
	row := func(what string, info bool, ok func(r steadyResult) bool, text func(r steadyResult) string) {
		t := target{what: what, info: info}
		met := true
		var parts []string
		for _, r := range b.steady {
			met = met && ok(r)
			parts = append(parts, r.shape.key+" "+text(r))
		}
		t.measured = strings.Join(parts, "; ")
		if !info {
			t.met = boolp(met)
		}
		ts = append(ts, t)
	}
	p := b.steady[0]
	row("steady state (§11): points loaded per new point ≤ 1.5", false,
		func(r steadyResult) bool { return r.loaded <= 1.5 }, func(r steadyResult) string { return fmt.Sprintf("%.2f", r.loaded) })
	row("steady state: rows served per new point ≤ 3", false,
		func(r steadyResult) bool { return r.served <= 3 }, func(r steadyResult) string { return fmt.Sprintf("%.1f", r.served) })
	if !b.o.quick { // the figures before are of the full-size shapes
		row("steady state: data requests (raw series and counts) per cycle ≤ 1.1 × before issue 37", false,
			func(r steadyResult) bool {
				before, ok := steadyDataBefore[r.shape.key]
				return ok && r.data+r.count <= 1.1*before
			},
			func(r steadyResult) string {
				return fmt.Sprintf("%.1f (bound %.2f)", r.data+r.count, 1.1*steadyDataBefore[r.shape.key])
			})
	}
	row("steady state: list requests per cycle ≤ the device and variable pages + 10 %", false,
		func(r steadyResult) bool { return r.list <= 1.1*r.listPages },
		func(r steadyResult) string { return fmt.Sprintf("%.1f (bound %.1f)", r.list, 1.1*r.listPages) })
	row(fmt.Sprintf("steady state: freshness p99 of on-time points ≤ one period + 2 s (%s)", p.period+2*time.Second), false,
		func(r steadyResult) bool { return r.onTimeP99 <= (r.period + 2*time.Second).Seconds() },
		func(r steadyResult) string { return fmt.Sprintf("%.1f s", r.onTimeP99) })
	row(fmt.Sprintf("steady state: late points land within idle_recheck + one period (%s), and every point written once", p.recheck+p.period), false,
		func(r steadyResult) bool {
			return r.unseen == 0 && r.landed == r.expected && r.lateMax <= (r.recheck+r.period).Seconds()
		},
		func(r steadyResult) string {
			return fmt.Sprintf("max %.1f s, %d unseen, FINAL %d of %d", r.lateMax, r.unseen, r.landed, r.expected)
		})
	return ts
}
