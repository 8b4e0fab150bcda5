package main

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// pointClass is what kind of point a live writer wrote.
type pointClass int

const (
	// onTime points are stamped at their write.
	onTime pointClass = iota
	// late points are stamped behind their variable's newest point, up
	// to a lookback behind the write, inside the lookback of the mark in
	// force.
	late
	// ahead points are stamped up to a period ahead of their write, as
	// by a device whose clock runs ahead.
	ahead
	// once points are the single point of a variable that reports once.
	once
	numClasses
)

var classNames = [numClasses]string{"on time", "late", "ahead", "report once"}

// pointKey names a point in the warehouse.
type pointKey struct {
	variable string
	ts       int64
}

// written is a point the writer wrote and the poller has not yet seen.
type written struct {
	class pointClass
	// at is when fleetsim acknowledged the write.
	at time.Time
	// ts is its timestamp.
	ts int64
}

// liveWriter writes a fleet's live points into fleetsim through
// POST /_sim/points, one batch a second, and tracks each point until the
// poller sees it in datapoints: its freshness is the time from the write's
// acknowledgement to that.
type liveWriter struct {
	ctl *simControl
	rnd *rand.Rand
	// active are the variables that get new, late and ahead points.
	active []string
	// onceVars get one point each, at onceAt[i] after the start.
	onceVars []string
	onceAt   []time.Duration
	// perSecond is how many points a second go to active variables, of
	// which the shares lateShare and aheadShare are late and ahead.
	perSecond             float64
	lateShare, aheadShare float64
	// lookback and period are the sync's, scaled: late points are stamped
	// up to lookback behind the write, ahead points up to period ahead.
	lookback, period time.Duration
	// floorMs is the greatest timestamp of the generated history: no live
	// point is stamped at or before it, so none replaces a generated one.
	floorMs int64

	mu sync.Mutex
	// pending are the points written and not yet seen.
	pending map[pointKey]written
	// taken are the timestamps written per variable, so no point
	// replaces another.
	taken map[pointKey]bool
	// recent are the on-time points of the last lookback, oldest first:
	// a late point goes behind one of them.
	recent []pointKey
	// log is every point written, in write order; fresh the freshness of
	// those seen.
	log   []written
	fresh []freshness
	// writeErr is the first failed write.
	writeErr error
}

// run writes a batch a second until ctx ends or d has passed since start.
func (w *liveWriter) run(ctx context.Context, start time.Time, d time.Duration) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	due, nextOnce := 0.0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if now.Sub(start) > d {
				return
			}
			due += w.perSecond
			n := int(due)
			due -= float64(n)
			var onceNow []string
			for nextOnce < len(w.onceVars) && now.Sub(start) >= w.onceAt[nextOnce] {
				onceNow = append(onceNow, w.onceVars[nextOnce])
				nextOnce++
			}
			if err := w.step(ctx, now, n, onceNow); err != nil {
				w.mu.Lock()
				if w.writeErr == nil {
					w.writeErr = err
				}
				w.mu.Unlock()
				return
			}
		}
	}
}

// step writes n points to random active variables and one to each of
// onceNow, in one request.
func (w *liveWriter) step(ctx context.Context, now time.Time, n int, onceNow []string) error {
	nowMs := now.UnixMilli()
	lookMs, periodMs := w.lookback.Milliseconds(), max(w.period.Milliseconds(), 1)
	lo := max(nowMs-lookMs+1000, w.floorMs+1)
	w.mu.Lock()
	// Forget the on-time points older than the lookback.
	cut := 0
	for cut < len(w.recent) && w.recent[cut].ts < nowMs-lookMs+1000 {
		cut++
	}
	w.recent = w.recent[cut:]
	type point struct {
		pointKey
		class pointClass
	}
	var pts []point
	// free returns ts, or the nearest free timestamp of v going by step.
	free := func(v string, ts, step int64) int64 {
		for w.taken[pointKey{v, ts}] {
			ts += step
		}
		return ts
	}
	add := func(v string, ts int64, c pointClass) {
		k := pointKey{v, ts}
		w.taken[k] = true
		pts = append(pts, point{k, c})
		if c == onTime || c == once {
			w.recent = append(w.recent, k)
		}
	}
	for _, v := range onceNow {
		add(v, free(v, nowMs, 1), once)
	}
	for range n {
		v := w.active[w.rnd.Intn(len(w.active))]
		switch r := w.rnd.Float64(); {
		case r < w.lateShare && len(w.recent) > 0:
			// Behind an on-time point of the last lookback, and at most
			// a lookback (less a second) behind now: inside the lookback
			// of any mark in force, which is at most now.
			prev := w.recent[w.rnd.Intn(len(w.recent))]
			if prev.ts-1 >= lo {
				ts := prev.ts - 1 - w.rnd.Int63n(prev.ts-lo)
				add(prev.variable, free(prev.variable, ts, -1), late)
				continue
			}
			add(v, free(v, nowMs, 1), onTime)
		case r < w.lateShare+w.aheadShare:
			add(v, free(v, nowMs+1+w.rnd.Int63n(periodMs), 1), ahead)
		default:
			add(v, free(v, nowMs, 1), onTime)
		}
	}
	w.mu.Unlock()
	if len(pts) == 0 {
		return nil
	}
	body := map[string][]map[string]any{}
	for _, p := range pts {
		body[p.variable] = append(body[p.variable], map[string]any{"timestamp": p.ts, "value": float64(w.rnd.Intn(10000)) / 100, "context": map[string]any{}})
	}
	if err := w.ctl.do(ctx, http.MethodPost, "/_sim/points", body, nil); err != nil {
		return fmt.Errorf("live writer: %w", err)
	}
	at := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pts {
		wr := written{class: p.class, at: at, ts: p.ts}
		w.pending[p.pointKey] = wr
		w.log = append(w.log, wr)
	}
	return nil
}

// freshness is how long a point took to be seen: from its write (an ahead
// point from its timestamp, when that is later) to the poll that saw it.
type freshness struct {
	written
	secs float64
}

// seen records that the points keys were visible at when.
func (w *liveWriter) seen(keys []pointKey, when time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		p, ok := w.pending[k]
		if !ok {
			continue
		}
		delete(w.pending, k)
		from := p.at
		if p.class == ahead {
			from = time.UnixMilli(max(p.ts, p.at.UnixMilli()))
		}
		w.fresh = append(w.fresh, freshness{p, when.Sub(from).Seconds()})
	}
}

// state returns how many points are still unseen and the first write
// error.
func (w *liveWriter) state() (pending int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending), w.writeErr
}

// writtenBetween counts the points written in [from, to) by class.
func (w *liveWriter) writtenBetween(from, to time.Time) [numClasses]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out [numClasses]int
	for _, p := range w.log {
		if !p.at.Before(from) && p.at.Before(to) {
			out[p.class]++
		}
	}
	return out
}

// freshnessBetween returns the freshness in seconds, sorted, of the seen
// points of class c written in [from, to).
func (w *liveWriter) freshnessBetween(c pointClass, from, to time.Time) []float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []float64
	for _, f := range w.fresh {
		if f.class == c && !f.at.Before(from) && f.at.Before(to) {
			out = append(out, f.secs)
		}
	}
	slices.Sort(out)
	return out
}

// oldestPending is the smallest timestamp of the points not seen yet; ok
// is false when none is pending.
func (w *liveWriter) oldestPending() (ts int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pending {
		if !ok || p.ts < ts {
			ts, ok = p.ts, true
		}
	}
	return ts, ok
}

// unseen returns the classes of the points not seen yet, counted.
func (w *liveWriter) unseen() [numClasses]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out [numClasses]int
	for _, p := range w.pending {
		out[p.class]++
	}
	return out
}

// visibilityPoller reads the points that became visible in a datapoints
// table since its last poll, by their version (fleetsync's load time in
// ns, taken before the INSERT it rides in is sent): each poll asks for
// versions above the previous poll's start less overlap, which covers an
// INSERT that took up to overlap to be acknowledged, and for timestamps
// from the oldest point still pending, so that a cycle that re-reads a
// history does not send it to every poll.
type visibilityPoller struct {
	conn    driver.Conn
	table   string
	every   time.Duration
	overlap time.Duration
	w       *liveWriter
	// polls counts the polls made and rows the rows they returned.
	polls, rows int
	err         error
}

func openPollConn(addr string) (driver.Conn, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 10 * time.Second, MaxOpenConns: 1})
	if err != nil {
		return nil, fmt.Errorf("clickhouse connection: %w", err)
	}
	return conn, nil
}

// run polls until ctx ends; the first error ends it too (p.err).
func (p *visibilityPoller) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		from, ok := p.w.oldestPending()
		if !ok {
			last = sent
			continue
		}
		if err := p.poll(ctx, last.Add(-p.overlap), from, sent); err != nil {
			if ctx.Err() == nil {
				p.err = err
			}
			return
		}
		last = sent
	}
}

// poll reads the rows of versions after since and timestamps from
// fromMs on, and marks their points seen at sent.
func (p *visibilityPoller) poll(ctx context.Context, since time.Time, fromMs int64, sent time.Time) error {
	rows, err := p.conn.Query(ctx, "SELECT variable_id, ts_ms FROM "+p.table+" WHERE version > ? AND ts_ms >= ?", uint64(since.UnixNano()), fromMs)
	if err != nil {
		return fmt.Errorf("poll %s: %w", p.table, err)
	}
	defer rows.Close()
	var keys []pointKey
	for rows.Next() {
		var k pointKey
		if err := rows.Scan(&k.variable, &k.ts); err != nil {
			return fmt.Errorf("poll %s: %w", p.table, err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("poll %s: %w", p.table, err)
	}
	p.polls++
	p.rows += len(keys)
	p.w.seen(keys, sent)
	return nil
}

// quantile is the q-quantile (nearest rank) of sorted values, NaN for
// none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return nan
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
