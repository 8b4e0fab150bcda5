package pipeline

import (
	"testing"
)

// Tests that kill mutants make mutate found alive in split.go: which cut
// frames plan which re-reads, and the future an open request's re-reads
// can no longer see.

func TestRereadsOfFramesAllProvenAreTheirRemaindersAlone(t *testing.T) {
	ts := &targetState{Target: Target{Variable: Variable{ID: "a"}}}
	cut := denseFrame(500, 509, 20)
	cut.t, cut.inner, cut.innerLo, cut.innerHi = ts, true, 500, 509
	got := rereads(&request{targets: []*targetState{ts}, start: 0, end: 1000}, []cutFrame{cut}, 10)
	if len(got) != 2 {
		t.Fatalf("%d re-reads, want the 2 ends around the proven window", len(got))
	}
	for i, want := range []window{{0, 499, false}, {510, 1000, false}} {
		r := got[i]
		if len(r.targets) != 1 || r.targets[0] != ts || r.start != want.start || r.end != want.end || r.open != want.open {
			t.Errorf("re-read %d: %d targets, [%d, %d] open %v; want a's [%d, %d] open %v", i, len(r.targets), r.start, r.end, r.open, want.start, want.end, want.open)
		}
	}
}

func TestRemainderReadsNoteTheFutureAProvenWindowLeavesUnreadPastAnOpenEnd(t *testing.T) {
	const end = 1000
	open := &request{start: 0, end: end, open: true}
	cases := []struct {
		name    string
		innerHi int64
		want    int64
	}{
		{"proven up to the end: the future starts after it", end, end + 1},
		{"proven past the end: the future starts after the proven window", end + 200, end + 201},
		{"proven up to the reach: nothing is hidden, nothing is noted here", open.seriesEnd(), 0},
	}
	for _, c := range cases {
		ts := &targetState{Target: Target{Variable: Variable{ID: "a"}}}
		cut := denseFrame(500, 509, 20)
		cut.t, cut.inner, cut.innerLo, cut.innerHi = ts, true, 500, c.innerHi
		req := *open
		req.targets = []*targetState{ts}
		remainderReads(&req, []cutFrame{cut}, 10)
		if ts.futureMs != c.want {
			t.Errorf("%s: future %d, want %d", c.name, ts.futureMs, c.want)
		}
	}
}

func TestHalvesOfAnOpenMillisecondReadItClosedAndNoteTheFutureAfterIt(t *testing.T) {
	ts := &targetState{Target: Target{Variable: Variable{ID: "a"}}}
	got := halves(&request{targets: []*targetState{ts}, start: 5000, end: 5000, open: true}, []cutFrame{{t: ts, count: -1}})
	if len(got) != 1 || got[0].start != 5000 || got[0].end != 5000 || got[0].open {
		t.Fatalf("halves %+v, want one closed read of [5000, 5000]", got)
	}
	if ts.futureMs != 5001 {
		t.Errorf("future %d, want 5001: the points after the millisecond are left unread", ts.futureMs)
	}
}
