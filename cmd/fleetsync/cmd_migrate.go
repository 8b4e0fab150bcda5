package main

import (
	"context"
	"fmt"
)

func cmdMigrate(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync migrate --config FILE")
	a, err := start(ctx, env, fs, cfgPath, args, false)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.ch.Schema().Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "schema of database %s is up to date\n", a.cfg.ClickHouse.Database)
	return nil
}
