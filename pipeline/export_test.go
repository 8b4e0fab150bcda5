package pipeline

// What the simulation (package pipeline_test, so that it can compose the
// commit chain from links outside this package, as cmd does) needs of
// the package's internals.

// FloorResolution is floorResolution: how finely the engine locates a
// retention floor it runs into.
const FloorResolution = floorResolution

// MarksOfMap is StateStore.MarksOf over a map of every mark, for the
// tests' stores.
func MarksOfMap(marks map[string]Mark, ids []string, fn func(Mark) error) error {
	for _, id := range ids {
		if m, ok := marks[id]; ok {
			if err := fn(m); err != nil {
				return err
			}
		}
	}
	return nil
}
