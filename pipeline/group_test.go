package pipeline

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// How Group packs targets into requests: the internals of a request
// (targetState) are the package's own.

// Requests follow window starts, a start far below a target's own never
// shared with it, and among equal starts (a backfill's) the order of
// variable ids, datapoints' sorting key: the rollup's check of
// a commit's variables then reads adjacent keys.
func TestGroupOrdersEqualStartsByVariableID(t *testing.T) {
	var targets []*targetState
	for i, id := range []string{"m", "c", "x", "a", "q", "b", "late"} {
		start := int64(100)
		if id == "late" {
			start = 100 - 10*3_600_000 // far below the others' slack
		}
		targets = append(targets, &targetState{Target: Target{Variable: Variable{ID: id}}, start: start, end: 200 + int64(i)})
	}
	var got []string
	for _, r := range Group(targets, 3) {
		var ids []string
		for _, tg := range r.targets {
			ids = append(ids, tg.Variable.ID)
		}
		got = append(got, strings.Join(ids, ","))
	}
	if want := []string{"late", "a,b,c", "m,q,x"}; !slices.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}

// TestRequestsShareStartsOnlyWithinEachTargetsSlack: 1,000 active
// windows of close starts share requests as 50 a request allows, while no
// target is read further below its own start than an eighth of its window.
func TestRequestsShareStartsOnlyWithinEachTargetsSlack(t *testing.T) {
	const end, floor = int64(1_700_000_000_000), int64(1_600_000_000_000)
	r := rand.New(rand.NewPCG(7, 7))
	var targets []*targetState
	for i := range 1000 {
		start := end - 3_600_000 - r.Int64N(300_000)
		switch i % 10 {
		case 0: // without a mark
			start = floor
		case 1: // marks days old
			start = end - r.Int64N(30*24*3_600_000)
		}
		targets = append(targets, &targetState{Target: Target{Variable: Variable{ID: fmt.Sprint("v", i)}}, start: start, end: end})
	}
	reqs := Group(targets, 50)
	for _, q := range reqs {
		for _, tg := range q.targets {
			if w := end - tg.start; q.start > tg.start || tg.start-q.start > max(w/8, min(w, minSlack)) {
				t.Fatalf("a request from %d carries a target starting at %d, %d ms below its own start (window %d ms)", q.start, tg.start, tg.start-q.start, end-tg.start)
			}
		}
	}
	// 800 active windows (16 requests' worth), 100 at the floor (2), and
	// 100 spread over 30 days, which share only with close neighbours.
	if len(reqs) > 16+2+40 {
		t.Errorf("%d requests, want at most %d", len(reqs), 16+2+40)
	}
	active := 0
	for _, q := range reqs {
		if end-q.start < 2*3_600_000 {
			active++
		}
	}
	if active > 17 {
		t.Errorf("%d requests for 800 active windows within 5 minutes of each other, want at most 17", active)
	}
}
