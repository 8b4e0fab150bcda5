package fleet

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// walkSource is a fleet of devices with variables that counts how the walk
// lists them. Its account-wide list names each variable's device unless
// anonymous is set, and adds a variable of a device the device list does
// not show when stray is set (a device created while the walk ran).
type walkSource struct {
	devices   []pipeline.Device
	vars      map[string][]pipeline.Variable // by device id
	anonymous bool
	stray     bool

	mu         sync.Mutex
	perDevice  int
	allListing int
}

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
	for _, d := range s.devices {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

func (s *walkSource) Variables(_ context.Context, d pipeline.Device, fn func(pipeline.Variable) error) error {
	s.mu.Lock()
	s.perDevice++
	s.mu.Unlock()
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
	for _, d := range s.devices {
		for _, v := range s.vars[d.ID] {
			if !s.anonymous {
				v.DeviceID = d.ID
			}
			if err := fn(v); err != nil {
				return err
			}
		}
	}
	if s.stray {
		return fn(pipeline.Variable{ID: "new-v0", Label: "var0", DeviceID: "new"})
	}
	return nil
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
	sy := &walker{l: src, opts: Options{MaxInFlight: 2}, log: zap.NewNop()}
	devices, vars, err := sy.walk(context.Background(), pipeline.Scope{})
	if err != nil {
		t.Fatal(err)
	}
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
			sy := &walker{l: src, opts: tc.opts, log: zap.NewNop()}
			devices, vars, err := sy.walk(context.Background(), pipeline.Scope{})
			if err != nil {
				t.Fatal(err)
			}
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
	sy := &walker{l: src, opts: Options{MaxInFlight: 2}, log: zap.NewNop()}
	devices, vars, err := sy.walk(context.Background(), pipeline.Scope{Devices: []string{"d03", "~dev-07"}})
	if err != nil {
		t.Fatal(err)
	}
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
	sy := &walker{l: src, opts: Options{MaxInFlight: 2}, log: zap.NewNop()}
	devices, vars, err := sy.walk(context.Background(), pipeline.Scope{Tags: []string{"cold"}})
	if err != nil {
		t.Fatal(err)
	}
	if src.allListing != 1 || src.perDevice != 0 {
		t.Fatalf("%d account-wide and %d per-device listings for half the fleet; want 1 and 0", src.allListing, src.perDevice)
	}
	got := walked(t, src, devices, vars)
	want := []string{"dev-01/d01-v0", "dev-01/d01-v1", "dev-02/d02-v0", "dev-02/d02-v1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("walk found %v, want %v", got, want)
	}
}
