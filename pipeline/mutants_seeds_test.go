package pipeline_test

import (
	"flag"
	"fmt"
	"os"
)

// FLEETSYNC_SIM_SEEDS sets TestSimulation's -sim.seeds where a flag cannot be
// passed: gremlins (make mutate) runs a bare `go test <package>` for each
// mutant. A -sim.seeds on the command line still wins, as flag.Parse runs
// after this.
func init() {
	v := os.Getenv("FLEETSYNC_SIM_SEEDS")
	if v == "" {
		return
	}
	if err := flag.Set("sim.seeds", v); err != nil {
		panic(fmt.Sprintf("FLEETSYNC_SIM_SEEDS=%q: %v", v, err))
	}
}
