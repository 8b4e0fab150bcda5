package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
)

// countSink is a pipeline.FrameSink that only counts: the source ceiling
// measures fetching and decoding, nothing downstream.
type countSink struct {
	points, rows int64
}

func (s *countSink) Point(int, fleetapi.Point) error { s.points++; return nil }

func (s *countSink) EndFrame(_ int, rows int) error { s.rows += int64(rows); return nil }

// apiClient is fleetsync's own API client pointed at a fleetsim.
func (b *bench) apiClient(url string) (*fleetapi.Client, error) {
	return fleetapi.New(fleetapi.Config{BaseURL: url, Tokens: fleetapi.StaticToken(token), PageSize: b.o.tune.PageSize}, nil, nil)
}

// variableIDs lists the fleet's variable ids through the API.
func variableIDs(ctx context.Context, c *fleetapi.Client) ([]string, error) {
	var ids []string
	err := c.AllVariables(ctx, func(v fleetapi.Variable) error {
		ids = append(ids, v.ID)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list variables: %w", err)
	}
	return ids, nil
}

// sourceStage measures fleetsim serving the fleet's raw series to
// fleetsync's client decoding into a counting sink: per-variable frames,
// variables_per_request variables per request, max_in_flight requests at a
// time, an explicit window and no limit.
type sourceStage struct {
	b            *bench
	sim          *simProc
	c            *fleetapi.Client
	ids          []string
	rate, simCPU *figure
}

func (st *sourceStage) prepare(ctx context.Context) error {
	b := st.b
	sim, err := b.fleet5M(ctx)
	if err != nil {
		return err
	}
	st.sim = sim
	if st.c, err = b.apiClient(sim.url); err != nil {
		return err
	}
	if st.ids, err = variableIDs(ctx, st.c); err != nil {
		return err
	}
	t := b.o.tune
	sec := b.section(fmt.Sprintf("2. Source ceiling: fleetsim (own process) → fleetapi client decoding into a counting sink, %d variables × %d points", len(st.ids), b.o.sizes.points))
	sec.note("`Client.Series` (join_dataframes false, columns timestamp, value.value, value.context), %d variables per request, %d requests in flight, start = now − 60 d, end = now, limit 0. Both processes share the machine's cores.", t.VariablesPerRequest, t.MaxInFlight)
	st.rate = sec.fig("source", "decoded points", "rows/s", 0)
	st.simCPU = sec.fig("", "fleetsim CPU per million points", "CPU-s", 2)
	return nil
}

func (st *sourceStage) run(ctx context.Context, r int) error {
	t := st.b.o.tune
	cpu := startCPU(st.sim.pid())
	now := time.Now()
	points, err := fetchAll(ctx, st.c, st.ids, t.VariablesPerRequest, t.MaxInFlight, now.Add(-60*24*time.Hour).UnixMilli(), now.UnixMilli())
	wall := time.Since(now)
	sc := cpu.stop()
	if err != nil {
		return err
	}
	st.rate.add(float64(points) / wall.Seconds())
	st.simCPU.add(sc / (float64(points) / 1e6))
	st.b.logf("source run %d: %d points in %.2fs, %.0f rows/s, fleetsim CPU %.1fs", r+1, points, wall.Seconds(), float64(points)/wall.Seconds(), sc)
	return nil
}

func (st *sourceStage) finish(context.Context) {}

// fetchAll reads every variable's raw series over [start, end] in requests
// of perRequest variables, inFlight at a time, and returns the points seen.
func fetchAll(ctx context.Context, c *fleetapi.Client, ids []string, perRequest, inFlight int, start, end int64) (int64, error) {
	reqs := make(chan []string)
	go func() {
		defer close(reqs)
		for i := 0; i < len(ids); i += perRequest {
			select {
			case reqs <- ids[i:min(i+perRequest, len(ids))]:
			case <-ctx.Done():
				return
			}
		}
	}()
	var total atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for part := range reqs {
				var s countSink
				err := c.Series(ctx, fleetapi.SeriesRequest{VariableIDs: part, Start: start, End: end, Limit: 0}, &s)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					continue
				}
				total.Add(s.points)
			}
		}()
	}
	wg.Wait()
	return total.Load(), first
}
