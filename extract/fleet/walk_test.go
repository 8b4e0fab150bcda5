package fleet

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// walkSource is a fleet of devices with variables that counts how the walk
// lists them. Its account-wide list names each variable's device unless
// anonymous is set, and adds a variable of a device the device list does
// not show when stray is set (a device created while the walk ran): after
// strayAfter variables, or at the end when that is 0. Devices in gone
// answer 404 to their variable listing; hidden devices are missing from the
// first device listing only (shifted past a page by a deletion).
type walkSource struct {
	devices    []pipeline.Device
	vars       map[string][]pipeline.Variable // by device id
	anonymous  bool
	stray      bool
	strayAfter int
	gone       map[string]bool
	hidden     map[string]bool
	// pageSize, when set, makes the account-wide list note "page N" in
	// events before it yields each page's variables.
	pageSize int
	events   *eventLog

	mu           sync.Mutex
	perDevice    int
	perDeviceRan int // listings that ran with a live context
	allListing   int
	deviceLists  int
}

// eventLog orders what the lister and the sink did.
type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(e string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ev = append(l.ev, e)
}

func (l *eventLog) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ev)
}

// notFound is a 404 as the client reports it.
type notFound struct{}

func (notFound) Error() string  { return "404 not found" }
func (notFound) NotFound() bool { return true }

func newWalkSource(devices, varsPer int) *walkSource {
	s := &walkSource{vars: map[string][]pipeline.Variable{}}
	for d := range devices {
		dev := pipeline.Device{ID: fmt.Sprintf("d%02d", d), Label: fmt.Sprintf("dev-%02d", d)}
		s.devices = append(s.devices, dev)
		for v := range varsPer {
			s.vars[dev.ID] = append(s.vars[dev.ID], pipeline.Variable{ID: fmt.Sprintf("%s-v%d", dev.ID, v), Label: fmt.Sprintf("var%d", v), LastActivityMs: 1})
		}
	}
	return s
}

func (s *walkSource) Devices(_ context.Context, fn func(pipeline.Device) error) error {
	s.mu.Lock()
	s.deviceLists++
	first := s.deviceLists == 1
	s.mu.Unlock()
	for _, d := range s.devices {
		if first && s.hidden[d.ID] {
			continue
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

func (s *walkSource) Variables(ctx context.Context, d pipeline.Device, fn func(pipeline.Variable) error) error {
	s.mu.Lock()
	s.perDevice++
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	s.perDeviceRan++
	s.mu.Unlock()
	if s.gone[d.ID] {
		return notFound{}
	}
	for _, v := range s.vars[d.ID] {
		if err := fn(v); err != nil {
			return err
		}
	}
	return nil
}

func (s *walkSource) AllVariables(_ context.Context, fn func(pipeline.Variable) error) error {
	s.mu.Lock()
	s.allListing++
	s.mu.Unlock()
	stray := func() error { return fn(pipeline.Variable{ID: "new-v0", Label: "var0", DeviceID: "new"}) }
	n := 0
	for _, d := range s.devices {
		for _, v := range s.vars[d.ID] {
			if s.pageSize > 0 && n%s.pageSize == 0 {
				s.events.add(fmt.Sprintf("page %d", n/s.pageSize+1))
			}
			n++
			if !s.anonymous {
				v.DeviceID = d.ID
			}
			if err := fn(v); err != nil {
				return err
			}
			if s.stray && n == s.strayAfter {
				if err := stray(); err != nil {
					return err
				}
			}
		}
	}
	if s.stray && s.strayAfter == 0 {
		return stray()
	}
	return nil
}

// recordingSink keeps what a walk hands it and checks the WalkSink
// contract as it goes: calls one at a time, each variable's device handed
// in an earlier Devices call. failAt, when set, fails the failAt-th call
// (counting every call from 1) with errSink.
type recordingSink struct {
	t      *testing.T
	events *eventLog
	failAt int

	busy    sync.Mutex
	calls   int
	devices []pipeline.Device
	vars    []pipeline.Variable
	batches []int
	handed  map[string]int // device id: the call that handed it
}

var errSink = errors.New("the sink is full")

// enter starts a call, which must hold busy until it returns.
func (r *recordingSink) enter() error {
	if !r.busy.TryLock() {
		r.t.Errorf("the walk called the sink while a call was running")
		r.busy.Lock()
	}
	r.calls++
	runtime.Gosched() // give an overlapping call its chance
	if r.calls == r.failAt {
		return errSink
	}
	return nil
}

func (r *recordingSink) Devices(_ context.Context, devices []pipeline.Device) error {
	defer r.busy.Unlock()
	if err := r.enter(); err != nil {
		return err
	}
	if r.handed == nil {
		r.handed = map[string]int{}
	}
	for _, d := range devices {
		if _, dup := r.handed[d.ID]; dup {
			r.t.Errorf("device %s handed twice", d.ID)
		}
		r.handed[d.ID] = r.calls
	}
	r.devices = append(r.devices, devices...)
	r.events.add(fmt.Sprintf("devices %d", len(devices)))
	return nil
}

func (r *recordingSink) Variables(_ context.Context, vars []pipeline.Variable) error {
	defer r.busy.Unlock()
	if err := r.enter(); err != nil {
		return err
	}
	for _, v := range vars {
		if _, ok := r.handed[v.DeviceID]; !ok {
			r.t.Errorf("variable %s handed before its device %s", v.ID, v.DeviceID)
		}
	}
	r.vars = append(r.vars, vars...)
	r.batches = append(r.batches, len(vars))
	r.events.add(fmt.Sprintf("variables %d", len(vars)))
	return nil
}

// walk runs the walker over src into a new recordingSink.
func walkInto(t *testing.T, src *walkSource, opts Options, scope pipeline.Scope) (*recordingSink, error) {
	t.Helper()
	sink := &recordingSink{t: t, events: src.events}
	sy := &walker{l: src, opts: opts, log: zap.NewNop()}
	return sink, sy.walk(context.Background(), scope, sink)
}

// walked lists "device-label/variable-id" of every variable the walk found,
// sorted, and checks that each carries its device's id and label.
func walked(t *testing.T, s *walkSource, devices []pipeline.Device, vars []pipeline.Variable) []string {
	t.Helper()
	labels := map[string]string{}
	for _, d := range s.devices {
		labels[d.ID] = d.Label
	}
	var out []string
	for _, v := range vars {
		if v.DeviceID == "" || labels[v.DeviceID] != v.DeviceLabel {
			t.Fatalf("variable %s carries device %q label %q; want a listed device and its label", v.ID, v.DeviceID, v.DeviceLabel)
		}
		out = append(out, v.DeviceLabel+"/"+v.ID)
	}
	sort.Strings(out)
	return out
}

func TestWalkListsVariablesAccountWideWhenEveryVariableNamesAListedDevice(t *testing.T) {
	src := newWalkSource(10, 3)
	sink, err := walkInto(t, src, Options{MaxInFlight: 2}, pipeline.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	devices, vars := sink.devices, sink.vars
	if src.allListing != 1 || src.perDevice != 0 {
		t.Fatalf("%d account-wide listings and %d per-device ones; want 1 and 0", src.allListing, src.perDevice)
	}
	if got := walked(t, src, devices, vars); len(got) != 30 || len(devices) != 10 {
		t.Fatalf("walk found %d devices and %d variables, want 10 and 30: %v", len(devices), len(got), got)
	}
}

func TestWalkListsEachDeviceWhenTheAccountWideListCannotBeTrusted(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*walkSource)
		opts Options
	}{
		{"variables name no device", func(s *walkSource) { s.anonymous = true }, Options{}},
		{"a variable names a device the list did not show", func(s *walkSource) { s.stray = true }, Options{}},
		{"per_device configured", func(*walkSource) {}, Options{PerDeviceVariables: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newWalkSource(10, 3)
			tc.set(src)
			tc.opts.MaxInFlight = 2
			sink, err := walkInto(t, src, tc.opts, pipeline.Scope{})
			if err != nil {
				t.Fatal(err)
			}
			devices, vars := sink.devices, sink.vars
			if src.perDevice != 10 {
				t.Fatalf("%d per-device listings, want 10 (one per device)", src.perDevice)
			}
			if got := walked(t, src, devices, vars); len(got) != 30 {
				t.Fatalf("walk found %d variables, want 30: %v", len(got), got)
			}
		})
	}
}

func TestWalkListsEachDeviceWhenTheScopeIsASmallPartOfTheFleet(t *testing.T) {
	src := newWalkSource(10, 3)
	sink, err := walkInto(t, src, Options{MaxInFlight: 2}, pipeline.Scope{Devices: []string{"d03", "~dev-07"}})
	if err != nil {
		t.Fatal(err)
	}
	devices, vars := sink.devices, sink.vars
	if src.allListing != 0 || src.perDevice != 2 {
		t.Fatalf("%d account-wide and %d per-device listings for 2 of 10 devices; want 0 and 2", src.allListing, src.perDevice)
	}
	got := walked(t, src, devices, vars)
	want := []string{"dev-03/d03-v0", "dev-03/d03-v1", "dev-03/d03-v2", "dev-07/d07-v0", "dev-07/d07-v1", "dev-07/d07-v2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("walk found %v, want %v", got, want)
	}
}

func TestWalkKeepsOnlyTheInScopeVariablesOfTheAccountWideList(t *testing.T) {
	src := newWalkSource(4, 2)
	src.devices[1].Tags = []string{"cold"}
	src.devices[2].Tags = []string{"cold"}
	sink, err := walkInto(t, src, Options{MaxInFlight: 2}, pipeline.Scope{Tags: []string{"cold"}})
	if err != nil {
		t.Fatal(err)
	}
	devices, vars := sink.devices, sink.vars
	if src.allListing != 1 || src.perDevice != 0 {
		t.Fatalf("%d account-wide and %d per-device listings for half the fleet; want 1 and 0", src.allListing, src.perDevice)
	}
	got := walked(t, src, devices, vars)
	want := []string{"dev-01/d01-v0", "dev-01/d01-v1", "dev-02/d02-v0", "dev-02/d02-v1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("walk found %v, want %v", got, want)
	}
}

func TestWalkHandsAccountWideBatchesBeforeTheListingEnds(t *testing.T) {
	src := newWalkSource(10, 300) // 3000 variables in 15 pages of 200
	src.pageSize, src.events = 200, &eventLog{}
	sink, err := walkInto(t, src, Options{MaxInFlight: 2}, pipeline.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	ev := src.events.events()
	firstVars := slices.IndexFunc(ev, func(e string) bool { return strings.HasPrefix(e, "variables") })
	lastPage := slices.Index(ev, "page 15")
	if firstVars < 0 || lastPage < 0 || firstVars > lastPage {
		t.Fatalf("the sink's first variables came at event %d, the last page was asked for at %d; want the variables first: %v", firstVars, lastPage, ev)
	}
	if ev[0] != "devices 10" {
		t.Errorf("first event %q, want the 10 devices before any variable", ev[0])
	}
	for _, n := range sink.batches {
		if n > walkBatch {
			t.Errorf("a batch of %d variables; want at most %d", n, walkBatch)
		}
	}
	if got := walked(t, src, sink.devices, sink.vars); len(got) != 3000 || src.perDevice != 0 {
		t.Fatalf("walk handed %d variables with %d per-device listings, want 3000 and 0", len(got), src.perDevice)
	}
}

func TestWalkFallbackHandsVariablesAgainAndEveryVariableArrives(t *testing.T) {
	src := newWalkSource(10, 300)
	// After 2500 variables (two batches handed), one names a device the
	// device list did not show.
	src.stray, src.strayAfter = true, 2500
	sink, err := walkInto(t, src, Options{MaxInFlight: 3}, pipeline.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	if src.allListing != 1 || src.perDevice != 10 {
		t.Fatalf("%d account-wide and %d per-device listings; want 1 and 10", src.allListing, src.perDevice)
	}
	if len(sink.vars) != 2*walkBatch+3000 {
		t.Errorf("the sink took %d variables, want %d (2 batches, then all 3000 again)", len(sink.vars), 2*walkBatch+3000)
	}
	times := map[string]int{}
	for _, v := range sink.vars {
		times[v.ID]++
	}
	for _, d := range src.devices {
		for _, v := range src.vars[d.ID] {
			if times[v.ID] == 0 {
				t.Fatalf("variable %s never handed", v.ID)
			}
		}
	}
	if len(times) != 3000 || times["new-v0"] != 0 {
		t.Errorf("%d distinct variables handed (stray handed %d times), want the 3000 listed", len(times), times["new-v0"])
	}
	walked(t, src, sink.devices, sink.vars)
}

func TestWalkStopsAtASinkErrorAndReturnsIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		failAt int
	}{
		{"devices", Options{MaxInFlight: 1}, 1},
		{"account-wide variables", Options{MaxInFlight: 1}, 3},
		{"per-device variables", Options{MaxInFlight: 1, PerDeviceVariables: true}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newWalkSource(10, 300)
			sink := &recordingSink{t: t, failAt: tc.failAt}
			sy := &walker{l: src, opts: tc.opts, log: zap.NewNop()}
			err := sy.walk(context.Background(), pipeline.Scope{}, sink)
			if !errors.Is(err, errSink) {
				t.Fatalf("walk returned %v, want the sink's error", err)
			}
			if sink.calls != tc.failAt {
				t.Errorf("the sink was called %d times, want %d (none after its error)", sink.calls, tc.failAt)
			}
			// Calls: the devices, then a batch or a device per call.
			if tc.opts.PerDeviceVariables && src.perDeviceRan != tc.failAt-1 {
				t.Errorf("%d device listings ran, want %d (the rest cancelled)", src.perDeviceRan, tc.failAt-1)
			}
			if tc.failAt == 1 && src.allListing+src.perDevice != 0 {
				t.Errorf("variables were listed after the sink refused the devices")
			}
		})
	}
}

func TestWalkPerDeviceHandsEachDeviceAfterItsDevicesCall(t *testing.T) {
	src := newWalkSource(10, 3)
	// d04 is deleted while the walk runs (its listing answers 404), which
	// had shifted d09 past a page of the first device listing.
	src.gone = map[string]bool{"d04": true}
	src.hidden = map[string]bool{"d09": true}
	src.events = &eventLog{}
	sink, err := walkInto(t, src, Options{MaxInFlight: 4, PerDeviceVariables: true}, pipeline.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	ev := src.events.events()
	if ev[0] != "devices 9" || !slices.Contains(ev, "devices 1") {
		t.Fatalf("events %v, want 9 devices first and d09 later", ev)
	}
	if sink.handed["d09"] <= sink.handed["d00"] {
		t.Errorf("d09 handed at call %d, the first listing at %d; want it after", sink.handed["d09"], sink.handed["d00"])
	}
	// One call per device with variables, each after its device's (the
	// sink checks that), and d09's after the second Devices call.
	if len(sink.batches) != 9 {
		t.Errorf("%d variable calls, want 9 (one per live device): %v", len(sink.batches), ev)
	}
	want := ev[slices.Index(ev, "devices 1")+1:]
	if len(want) != 1 || want[0] != "variables 3" {
		t.Errorf("after d09's devices call: %v, want its 3 variables", want)
	}
	got := walked(t, src, sink.devices, sink.vars)
	for _, g := range got {
		if strings.HasPrefix(g, "dev-04/") {
			t.Errorf("variable %s of the deleted device handed", g)
		}
	}
	if len(got) != 27 {
		t.Errorf("%d variables handed, want 27: %v", len(got), got)
	}
}
