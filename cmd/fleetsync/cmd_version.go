package main

import (
	"context"
	"fmt"
	"runtime"
)

func cmdVersion(_ context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "fleetsync %s (%s)\n", version, goVersion())
	return nil
}

func goVersion() string { return runtime.Version() }
