package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// The hosted service this API resembles documents about 4 requests per
// second per token. This part runs fleetsync against fleetsim limited that
// way (a per-token token bucket answering 429 without Retry-After, 50 ms
// of latency on every request) on the 10 000-variable fleet: a first sync
// and an incremental cycle with 1 % of the variables changed, with no
// request rate configured (fleetsync finds the limit itself).

const (
	limitRate    = 4
	limitLatency = "50ms"
)

// rateSecond is one entry of fleetsim's /_sim/ratelimit/stats.
type rateSecond struct {
	Unix      int64 `json:"unix"`
	Admitted  int   `json:"admitted"`
	Limited   int   `json:"limited_429"`
	Exhausted int   `json:"exhausted_420"`
}

// limitStats reads and resets fleetsim's per-second counts of its limits:
// the requests answered, the 429s, and the seconds they span.
func (c *simControl) limitStats(ctx context.Context) (answered, throttled int, span float64, err error) {
	var secs []rateSecond
	if err := c.do(ctx, http.MethodGet, "/_sim/ratelimit/stats", nil, &secs); err != nil {
		return 0, 0, 0, err
	}
	if err := c.do(ctx, http.MethodDelete, "/_sim/ratelimit/stats", nil, nil); err != nil {
		return 0, 0, 0, err
	}
	for _, s := range secs {
		answered += s.Admitted
		throttled += s.Limited
	}
	if len(secs) > 0 {
		span = float64(secs[len(secs)-1].Unix - secs[0].Unix + 1)
	}
	return answered, throttled, span, nil
}

// rateLimited measures the first sync and the 1 %-changed cycle against a
// rate-limited fleetsim, at the defaults and with source.page_size 100 (the
// default before issue 14: ten times the list requests per cycle).
func (b *bench) rateLimited(ctx context.Context) error {
	s := b.o.sizes
	if b.sim != nil {
		b.sim.stop()
		b.sim = nil
	}
	args := append(simArgs(s.incrDevices, s.incrVars, s.incrPoints, "1d"), "--rate-limit", fmt.Sprint(limitRate), "--latency", limitLatency)
	sim, err := startSim(ctx, filepath.Join(b.o.bin, "fleetsim"), args...)
	if err != nil {
		return err
	}
	defer sim.stop()
	ctl := &simControl{base: sim.url, hc: &http.Client{Timeout: time.Minute}}
	nvars := s.incrDevices * s.incrVars
	b.logf("fleetsim pid %d on %s: %d variables × %d points, --rate-limit %d --latency %s", sim.pid(), sim.url, nvars, s.incrPoints, limitRate, limitLatency)
	ids, err := b.variableIDs(ctx, ctl)
	if err != nil {
		return err
	}
	sec := b.section(fmt.Sprintf("Rate-limited service: fleetsim at %d requests/s per token (429 without Retry-After) and %s latency, %d variables × %d points, no request rate configured",
		limitRate, limitLatency, nvars, s.incrPoints))
	for _, v := range []struct{ name, label, source string }{
		{"defaults", "defaults", ""},
		{"page100", "source.page_size 100 (the default before issue 14)", "  page_size: 100\n"},
	} {
		db := "bench_rl_" + v.name
		cfg := filepath.Join(b.dir, db+".yaml")
		if err := b.writeConfig(cfg, sim.url, db, configLines{source: v.source}); err != nil {
			return err
		}
		firstWall := sec.fig("", v.label+": first sync, wall time", "s", 1)
		firstRate := sec.fig("", v.label+": first sync, requests answered per second (of the 4 allowed)", "req/s", 2)
		firstThrottled := sec.fig("", v.label+": first sync, requests throttled (429)", "requests", 0)
		incWall := sec.fig("ratelimit-incr-"+v.name, v.label+": 1 % changed cycle, wall time", "s", 1)
		incData := sec.fig("", v.label+": 1 % changed cycle, data requests", "requests", 0)
		incList := sec.fig("", v.label+": 1 % changed cycle, list requests", "requests", 0)
		incThrottled := sec.fig("", v.label+": 1 % changed cycle, requests throttled (429)", "requests", 0)
		for r := range b.o.runs {
			if _, err := b.chClient(ctx, "DROP DATABASE IF EXISTS "+db, nil, nil); err != nil {
				return err
			}
			if _, _, _, err := ctl.limitStats(ctx); err != nil {
				return err
			}
			first, fc, err := b.countedSync(ctx, fmt.Sprintf("rl-%s-first-%d", v.name, r+1), cfg, sim, ctl, db)
			if err != nil {
				return err
			}
			answered, throttled, span, err := ctl.limitStats(ctx)
			if err != nil {
				return err
			}
			firstWall.add(first.wall.Seconds())
			firstRate.add(float64(answered) / span)
			firstThrottled.add(float64(throttled))
			b.logf("%s run %d, first sync: %.1fs, %d points, %d data and %d list requests, %d answered over %.0fs (%.2f/s), %d throttled",
				v.name, r+1, first.wall.Seconds(), first.rows, fc.data, fc.list, answered, span, float64(answered)/span, throttled)
			changed, err := b.changeOnePercent(ctx, ctl, ids, r)
			if err != nil {
				return err
			}
			res, cc, err := b.countedSync(ctx, fmt.Sprintf("rl-%s-changed-%d", v.name, r+1), cfg, sim, ctl, db)
			if err != nil {
				return err
			}
			if res.log.Points < int64(changed) {
				return fmt.Errorf("the changed cycle loaded %d points, want at least the %d new ones", res.log.Points, changed)
			}
			_, throttled, _, err = ctl.limitStats(ctx)
			if err != nil {
				return err
			}
			incWall.add(res.wall.Seconds())
			incData.add(float64(cc.data))
			incList.add(float64(cc.list))
			incThrottled.add(float64(throttled))
			b.logf("%s run %d, 1%% changed: %.1fs, %d points, %d data and %d list requests, %d throttled",
				v.name, r+1, res.wall.Seconds(), res.log.Points, cc.data, cc.list, throttled)
			if r == 0 {
				sec.note("%s, requests of the first changed cycle by endpoint: %s.", v.label, describeCounts(cc.keys))
			}
		}
		if _, err := b.chClient(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db, nil, nil); err != nil {
			return err
		}
	}
	sec.note("fleetsync runs with the configuration's defaults (`requests_per_second: 0`: it learns the limit from the 429s; `page_size: 1000`), and with `source.page_size: 100` beside them. Every cycle lists devices, variables, groups and organizations again, so at 4 requests per second its wall time follows the number of list pages. Requests counted by fleetsim; requests per second = requests answered (not throttled) over the whole seconds from the first to the last request of the sync. Before each changed cycle, 1 %% of the variables get new points. The machine was shared with other work while measured.")
	return nil
}

// variableIDs lists the fleet's variable ids through fleetsim's control
// interface (not rate limited).
func (b *bench) variableIDs(ctx context.Context, ctl *simControl) ([]string, error) {
	var devices []struct {
		Variables []struct {
			ID string `json:"id"`
		} `json:"variables"`
	}
	if err := ctl.do(ctx, http.MethodGet, "/_sim/devices", nil, &devices); err != nil {
		return nil, err
	}
	var ids []string
	for _, d := range devices {
		for _, v := range d.Variables {
			ids = append(ids, v.ID)
		}
	}
	return ids, nil
}

// changeOnePercent gives 1 % of the variables (other ones each run r) three
// new points, and returns how many points it added.
func (b *bench) changeOnePercent(ctx context.Context, ctl *simControl, ids []string, r int) (int, error) {
	n := max(1, len(ids)/100)
	now := time.Now().UnixMilli()
	const perVar = 3
	for k := range n {
		id := ids[(k*len(ids)/n+r+1)%len(ids)]
		pts := make([]map[string]any, perVar)
		for j := range pts {
			pts[j] = map[string]any{"timestamp": now - 3000 + int64(j), "value": 2.5 + float64(j), "context": map[string]any{}}
		}
		if err := ctl.do(ctx, http.MethodPost, "/_sim/variables/"+id+"/points", pts, nil); err != nil {
			return 0, err
		}
	}
	return n * perVar, nil
}
