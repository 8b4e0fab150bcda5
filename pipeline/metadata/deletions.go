package metadata

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/pipeline"
)

// markDeleted flags stored devices and variables the source no longer has.
// The walk is complete (a failed walk never reaches here), but when it was
// scoped a missing device may only be out of scope: then only devices
// missing from the whole account's listing count as deleted. A device's
// variable listing is complete, so a stored variable of a walked device
// that the walk did not see is deleted, and so is one of a device that is
// gone, whether or not that device is still stored live: another process
// may have marked the device deleted while this one's walk still stored
// the variable. missing are the live variables the walk did not see.
func (f *Refresh) markDeleted(ctx context.Context, devices []pipeline.Device, scoped bool, live map[string]string, missing []StoredRef) error {
	walked := make(map[string]bool, len(devices))
	for _, d := range devices {
		walked[d.ID] = true
	}
	// The devices that may be gone: stored live and not walked, or named
	// by a stored variable the walk lacked and not walked.
	var gone []string
	candidate := map[string]bool{}
	for id := range live {
		if !walked[id] {
			candidate[id] = true
			gone = append(gone, id)
		}
	}
	for _, v := range missing {
		if !walked[v.DeviceID] && !candidate[v.DeviceID] {
			candidate[v.DeviceID] = true
			gone = append(gone, v.DeviceID)
		}
	}
	if len(devices) == 0 && len(gone) > 0 && !scoped {
		// An empty account is more likely a source answering oddly than a
		// fleet deleted whole; do not wipe the warehouse's view on it.
		f.log.Warn("the source listed no devices at all; not marking the stored ones deleted", zap.Int("stored", len(gone)))
		return nil
	}
	if scoped && len(gone) > 0 {
		exists := map[string]bool{}
		if err := f.src.Devices(ctx, func(d pipeline.Device) error {
			exists[d.ID] = true
			return nil
		}); err != nil {
			return fmt.Errorf("list all devices to tell deleted from out-of-scope ones: %w", err)
		}
		gone = slices.DeleteFunc(gone, func(id string) bool { return exists[id] })
	}
	goneSet := make(map[string]bool, len(gone))
	for _, id := range gone {
		goneSet[id] = true
	}
	var goneVars []string
	for _, v := range missing {
		if goneSet[v.DeviceID] || walked[v.DeviceID] {
			goneVars = append(goneVars, v.ID)
		}
	}
	// Only the devices stored live are marked.
	gone = slices.DeleteFunc(gone, func(id string) bool { _, ok := live[id]; return !ok })
	sort.Strings(gone)
	sort.Strings(goneVars)
	if len(gone) > 0 {
		if err := f.store.MarkDevicesDeleted(ctx, gone); err != nil {
			return fmt.Errorf("mark %d deleted devices: %w", len(gone), err)
		}
		f.log.Info("devices deleted in the source marked deleted", zap.Int("count", len(gone)))
	}
	if len(goneVars) > 0 {
		if err := f.store.MarkVariablesDeleted(ctx, goneVars); err != nil {
			return fmt.Errorf("mark %d deleted variables: %w", len(goneVars), err)
		}
		f.log.Info("variables deleted in the source marked deleted", zap.Int("count", len(goneVars)))
	}
	return nil
}
