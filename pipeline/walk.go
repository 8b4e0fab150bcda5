package pipeline

import "context"

// WalkAll collects a whole walk of src: every in-scope device and
// variable, each once. It holds the fleet, so it serves the commands that
// need all of it at once (verify); a cycle and a backfill take the walk
// page by page instead.
func WalkAll(ctx context.Context, src Source, scope Scope) ([]Device, []Variable, error) {
	var c walkCollector
	if err := src.Walk(ctx, scope, &c); err != nil {
		return nil, nil, err
	}
	return c.devices, c.vars, nil
}

// walkCollector is the WalkSink of WalkAll.
type walkCollector struct {
	devices  []Device
	vars     []Variable
	seenDev  map[string]bool
	seenVars map[string]bool
}

func (c *walkCollector) Devices(_ context.Context, devices []Device) error {
	if c.seenDev == nil {
		c.seenDev = map[string]bool{}
	}
	for _, d := range devices {
		if !c.seenDev[d.ID] {
			c.seenDev[d.ID] = true
			c.devices = append(c.devices, d)
		}
	}
	return nil
}

func (c *walkCollector) Variables(_ context.Context, vars []Variable) error {
	if c.seenVars == nil {
		c.seenVars = map[string]bool{}
	}
	for _, v := range vars {
		if !c.seenVars[v.ID] {
			c.seenVars[v.ID] = true
			c.vars = append(c.vars, v)
		}
	}
	return nil
}
