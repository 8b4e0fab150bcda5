package pipeline

// What the simulation (package pipeline_test, so that it can compose the
// commit chain from links outside this package, as cmd does) needs of
// the package's internals.

// FloorResolution is floorResolution: how finely the engine locates a
// retention floor it runs into.
const FloorResolution = floorResolution
