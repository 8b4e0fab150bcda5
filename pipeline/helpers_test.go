package pipeline

// What only tests use: a plan of a whole walk at once. A cycle plans its
// walk a chunk at a time (sync.go, cycleWalk).

// Plan turns the in-scope variables and their marks into targets. It returns
// the targets to read and the number of variables skipped as idle.
func Plan(vars []Variable, marks map[string]Mark, o PlanOptions) (targets []Target, skipped int) {
	o.reported = lastActivityReported(vars)
	return planWith(vars, func(id string) (Mark, bool) { m, ok := marks[id]; return m, ok }, o)
}
