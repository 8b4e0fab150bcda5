package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline"
)

// simControl talks to fleetsim's /_sim/ control interface.
type simControl struct {
	base string
	hc   *http.Client
}

func (c *simControl) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return nil
}

// requestCounts splits fleetsim's counters into Data API (/api/v1.6) and
// Platform API list (/api/v2.0) requests.
type requestCounts struct {
	data, list, other int
	keys              map[string]int
}

func (c *simControl) counts(ctx context.Context) (requestCounts, error) {
	var m map[string]int
	if err := c.do(ctx, http.MethodGet, "/_sim/counters", nil, &m); err != nil {
		return requestCounts{}, err
	}
	rc := requestCounts{keys: m}
	for k, n := range m {
		if strings.HasPrefix(k, "cut ") {
			continue // also counted under its status
		}
		switch f := strings.Fields(k); {
		case len(f) >= 2 && strings.HasPrefix(f[1], "/api/v1.6/"):
			rc.data += n
		case len(f) >= 2 && strings.HasPrefix(f[1], "/api/v2.0/"):
			rc.list += n
		default:
			rc.other += n
		}
	}
	return rc, nil
}

func (c *simControl) reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/_sim/counters/reset", nil, nil)
}

// startIncrFleet stops the 5 M fleet's fleetsim, which the incremental
// measurements do not need, and starts one serving their 10 000-variable
// fleet; nvars is how many variables it has.
func (b *bench) startIncrFleet(ctx context.Context) (sim *simProc, ctl *simControl, nvars int, err error) {
	s := b.o.sizes
	b.sim.stop()
	b.sim = nil
	sim, err = startSim(ctx, filepath.Join(b.o.bin, "fleetsim"), simArgs(s.incrDevices, s.incrVars, s.incrPoints, "1d")...)
	if err != nil {
		return nil, nil, 0, err
	}
	b.logf("fleetsim pid %d on %s: %d devices × %d variables × %d points", sim.pid(), sim.url, s.incrDevices, s.incrVars, s.incrPoints)
	return sim, &simControl{base: sim.url, hc: &http.Client{Timeout: time.Minute}}, s.incrDevices * s.incrVars, nil
}

// countedSync runs one `fleetsync sync` with fleetsim's counters reset
// before it, and returns the result with the requests it made.
func (b *bench) countedSync(ctx context.Context, name, cfg string, sim *simProc, ctl *simControl, db string) (syncResult, requestCounts, error) {
	if err := ctl.reset(ctx); err != nil {
		return syncResult{}, requestCounts{}, err
	}
	res, err := b.runSync(ctx, name, cfg, sim, db)
	if err != nil {
		return res, requestCounts{}, fmt.Errorf("%s: %w", name, err)
	}
	rc, err := ctl.counts(ctx)
	return res, rc, err
}

// incremental measures the request cost of cycles after a first sync: one
// where 1 % of the variables received new points and one where nothing
// changed.
func (b *bench) incremental(ctx context.Context) error {
	sim, ctl, nvars, err := b.startIncrFleet(ctx)
	if err != nil {
		return err
	}
	defer sim.stop()
	var devices []struct {
		Variables []struct {
			ID string `json:"id"`
		} `json:"variables"`
	}
	if err := ctl.do(ctx, http.MethodGet, "/_sim/devices", nil, &devices); err != nil {
		return err
	}
	var ids []string
	for _, d := range devices {
		for _, v := range d.Variables {
			ids = append(ids, v.ID)
		}
	}
	if len(ids) != nvars {
		return fmt.Errorf("fleetsim lists %d variables, want %d", len(ids), nvars)
	}

	s := b.o.sizes
	sec := b.section(fmt.Sprintf("5. Incremental cycle cost: %d devices × %d variables (%d variables, %d points each over 1 d)", s.incrDevices, s.incrVars, nvars, s.incrPoints))
	const db = "bench_incr"
	cfg := filepath.Join(b.dir, db+".yaml")
	if err := b.syncConfig(cfg, sim.url, db, b.o.tune.RowsPerRequest); err != nil {
		return err
	}
	defer b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil)
	// The same fleet synced into a second database with sync.rollups off:
	// its changed cycles, beside the measured ones, give what the analyst
	// tables add to a cycle.
	const bareDB = db + "_bare"
	bareCfg := filepath.Join(b.dir, bareDB+".yaml")
	if err := b.syncConfig(bareCfg, sim.url, bareDB, b.o.tune.RowsPerRequest, "rollups: false"); err != nil {
		return err
	}
	defer b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+bareDB, nil, nil)
	first, fc, err := b.countedSync(ctx, "incr-first", cfg, sim, ctl, db)
	if err != nil {
		return err
	}
	if _, err := b.runSync(ctx, "incr-bare-first", bareCfg, sim, bareDB); err != nil {
		return fmt.Errorf("incr-bare-first: %w", err)
	}
	b.logf("first sync: %d points in %.2fs, %d data and %d list requests", first.rows, first.wall.Seconds(), fc.data, fc.list)
	t := b.o.tune
	sec.note("Same configuration as the backfills (`variables_per_request: %d`, `max_in_flight: %d`, `source.page_size: %d`, `skip_idle: true`). The first sync loaded %d points in %.2f s with %d data and %d list requests.",
		t.VariablesPerRequest, t.MaxInFlight, t.PageSize, first.rows, first.wall.Seconds(), fc.data, fc.list)

	changed := max(1, nvars/100)
	b.incrChanged = changed
	const newPoints = 3
	sec.note("Changed cycle: before it, %d variables (1 %%) each get %d new points through `POST /_sim/variables/{id}/points`; each run changes other variables. Requests counted by fleetsim (`/_sim/counters`, reset before each cycle): data = Data API (`/api/v1.6/…`), list = Platform API (`/api/v2.0/…`). Wall time = the whole `fleetsync sync` process. What the analyst tables add: the same fleet is synced into a second database with `sync.rollups: false`, whose changed cycle (the same new points) runs beside each measured one, the pairs alternating which goes first; CPU = fleetsync's and the server's over each cycle. A cycle lasts about a second, so these differences are small against the run-to-run noise of two shared cores: read them with their min and max.", changed, newPoints)
	chData := sec.fig("changed-data", "1 % changed: data requests", "requests", 0)
	chList := sec.fig("", "1 % changed: list requests", "requests", 0)
	chWall := sec.fig("", "1 % changed: wall time", "s", 2)
	chRollup := sec.fig("", "1 % changed: time recomputing the rollups", "s", 3)
	chShare := sec.fig("rollup-incr", "1 % changed: rollup time / wall time", "%", 1)
	chBare := sec.fig("", "1 % changed: wall time of the same cycle with `sync.rollups: false`", "s", 2)
	chExtraShare := sec.fig("rollup-extra-incr", "1 % changed: wall time the analyst tables add / wall time with them", "%", 1)
	chCPUExtra := sec.fig("", "1 % changed: CPU the analyst tables add (fleetsync + clickhouse-server, with them − without)", "CPU-s", 2)
	chCPUExtraShare := sec.fig("", "1 % changed: CPU the analyst tables add / fleetsync + clickhouse-server CPU with them", "%", 1)
	idData := sec.fig("idle-data", "nothing changed: data requests", "requests", 0)
	idList := sec.fig("", "nothing changed: list requests", "requests", 0)
	idWall := sec.fig("", "nothing changed: wall time", "s", 2)
	for r := range b.o.runs {
		now := time.Now().UnixMilli()
		for k := range changed {
			id := ids[(k*nvars/changed+r+1)%nvars]
			pts := make([]map[string]any, newPoints)
			for j := range pts {
				pts[j] = map[string]any{"timestamp": now - 3000 + int64(j), "value": 1.5 + float64(j), "context": map[string]any{}}
			}
			if err := ctl.do(ctx, http.MethodPost, "/_sim/variables/"+id+"/points", pts, nil); err != nil {
				return err
			}
		}
		// The cycle without the tables goes first every other run, as the
		// backfill pairs do.
		var bare syncResult
		runBare := func() (err error) {
			b.quiesce(ctx)
			bare, err = b.runSync(ctx, fmt.Sprintf("incr-bare-changed-%d", r+1), bareCfg, sim, bareDB)
			if err != nil {
				return fmt.Errorf("incr-bare-changed-%d: %w", r+1, err)
			}
			return nil
		}
		if r%2 == 1 {
			if err := runBare(); err != nil {
				return err
			}
		}
		b.quiesce(ctx)
		res, cc, err := b.countedSync(ctx, fmt.Sprintf("incr-changed-%d", r+1), cfg, sim, ctl, db)
		if err != nil {
			return err
		}
		if r%2 == 0 {
			if err := runBare(); err != nil {
				return err
			}
		}
		if res.log.Points < int64(changed*newPoints) {
			return fmt.Errorf("the changed cycle loaded %d points, want at least the %d new ones", res.log.Points, changed*newPoints)
		}
		chData.add(float64(cc.data))
		chList.add(float64(cc.list))
		chWall.add(res.wall.Seconds())
		chRollup.add(res.log.Rollup)
		chShare.add(100 * res.log.Rollup / res.wall.Seconds())
		withCPU, bareCPU := res.user+res.sys+res.chCPU, bare.user+bare.sys+bare.chCPU
		chBare.add(bare.wall.Seconds())
		chExtraShare.add(100 * (res.wall.Seconds() - bare.wall.Seconds()) / res.wall.Seconds())
		chCPUExtra.add(withCPU - bareCPU)
		chCPUExtraShare.add(100 * (withCPU - bareCPU) / withCPU)
		b.logf("run %d, 1%% changed: %.2fs, %d points, %d data and %d list requests (fleetsync read %d variables, %d idle); without the analyst tables %.2fs, %d points (they add %.2fs and %.2f CPU-s of fleetsync and clickhouse)",
			r+1, res.wall.Seconds(), res.log.Points, cc.data, cc.list, res.log.Read, res.log.Idle, bare.wall.Seconds(), bare.log.Points, res.wall.Seconds()-bare.wall.Seconds(), withCPU-bareCPU)

		res, ic, err := b.countedSync(ctx, fmt.Sprintf("incr-idle-%d", r+1), cfg, sim, ctl, db)
		if err != nil {
			return err
		}
		idData.add(float64(ic.data))
		idList.add(float64(ic.list))
		idWall.add(res.wall.Seconds())
		b.logf("run %d, idle: %.2fs, %d points, %d data and %d list requests", r+1, res.wall.Seconds(), res.log.Points, ic.data, ic.list)
		if r == 0 {
			sec.note("Requests of the first changed cycle by endpoint: %s.", describeCounts(cc.keys))
		}
	}
	return b.walkCost(ctx, sec, sim, ctl)
}

// walkCost measures the metadata walk of a cycle alone, in this process
// with fleetsync's API client: with the account-wide variable list, as
// pipeline.Syncer.Walk lists variables when the service names their devices
// (a request per page), and per device, as it does otherwise or with
// source.variables_listing: per_device (a request per device).
func (b *bench) walkCost(ctx context.Context, sec *section, sim *simProc, ctl *simControl) error {
	c, err := b.apiClient(sim.url)
	if err != nil {
		return err
	}
	perReq := sec.fig("", "walk alone, per device (variables_listing: per_device): list requests", "requests", 0)
	perWall := sec.fig("", "walk alone, per device (variables_listing: per_device): wall time", "s", 2)
	allReq := sec.fig("", "walk alone, account-wide (variables_listing: auto): list requests", "requests", 0)
	allWall := sec.fig("", "walk alone, account-wide (variables_listing: auto): wall time", "s", 2)
	for range b.o.runs {
		for _, perDevice := range []bool{true, false} {
			if err := ctl.reset(ctx); err != nil {
				return err
			}
			began := time.Now()
			n, err := walk(ctx, c, perDevice, b.o.tune.MaxInFlight)
			wall := time.Since(began)
			if err != nil {
				return err
			}
			rc, err := ctl.counts(ctx)
			if err != nil {
				return err
			}
			if perDevice {
				perReq.add(float64(rc.list))
				perWall.add(wall.Seconds())
			} else {
				allReq.add(float64(rc.list))
				allWall.add(wall.Seconds())
			}
			b.logf("walk (per device %v): %d variables, %d list requests, %.2fs", perDevice, n, rc.list, wall.Seconds())
		}
	}
	sec.note("\"Walk alone\" lists devices and variables with fleetsync's client (`fleetapi.Client`), %d requests in flight for the per-device listing, `page_size: %d`, to show what each way of listing costs: `GET /devices/` pages, then either `GET /variables/` pages (what a cycle does when, as in fleetsim, every variable there names a listed device) or one `GET /devices/{id}/variables/` per device (what it does otherwise).", b.o.tune.MaxInFlight, b.o.tune.PageSize)
	return nil
}

// walk lists every device and variable and returns the variable count.
func walk(ctx context.Context, c *fleetapi.Client, perDevice bool, inFlight int) (int, error) {
	var devices []fleetapi.Device
	if err := c.Devices(ctx, func(d fleetapi.Device) error { devices = append(devices, d); return nil }); err != nil {
		return 0, err
	}
	if !perDevice {
		n := 0
		err := c.AllVariables(ctx, func(fleetapi.Variable) error { n++; return nil })
		return n, err
	}
	var n atomic.Int64
	errs := pipeline.ForEach(ctx, len(devices), inFlight, func(i int) error {
		return c.Variables(ctx, devices[i], func(fleetapi.Variable) error { n.Add(1); return nil })
	})
	return int(n.Load()), errors.Join(errs...)
}

// describeCounts lists counters as "KEY: n" sorted by key.
func describeCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("`%s` %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
