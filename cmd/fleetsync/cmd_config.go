package main

import (
	"context"
	"fmt"

	"github.com/fleetsync/fleetsync/config"
)

func cmdConfigExample(_ context.Context, env *cliEnv, args []string) error {
	fs := newFlags(env, "fleetsync config")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprint(env.stdout, config.Example())
	return nil
}
