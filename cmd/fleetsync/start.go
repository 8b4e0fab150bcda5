package main

import (
	"context"
	"flag"
	"fmt"
)

// configFlags is the flag set of a command that works from a configuration
// file, with its --config flag.
func configFlags(env *cliEnv, usage string) (*flag.FlagSet, *string) {
	fs := newFlags(env, usage)
	return fs, fs.String("config", "", "configuration file (YAML)")
}

// start is how every command that works on a warehouse begins: its flags,
// then checks of their values (before anything is read), then the
// configuration, then the app; withSource also wires the API client. The
// caller closes the app.
func start(ctx context.Context, env *cliEnv, fs *flag.FlagSet, cfgPath *string, args []string, withSource bool, checks ...func() error) (*app, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return nil, err
		}
	}
	cfg, err := loadConfig(env, *cfgPath)
	if err != nil {
		return nil, err
	}
	return openApp(ctx, env, cfg, withSource)
}

// startForRange is the start that backfill and verify share: the closed
// range of --from and --to, checked before the configuration is read, and
// the app with the schema ensured and the token read. The caller closes
// the app.
func startForRange(ctx context.Context, env *cliEnv, fs *flag.FlagSet, cfgPath *string, args []string, fromS, toS *string) (a *app, from, to int64, err error) {
	a, err = start(ctx, env, fs, cfgPath, args, true, rangeCheck(fromS, toS, &from, &to))
	if err != nil {
		return nil, 0, 0, err
	}
	if err = a.ch.Schema().EnsureSchema(ctx); err != nil {
		a.Close()
		return nil, 0, 0, fmt.Errorf("ensure schema: %w", err)
	}
	a.restoreRate(ctx)
	if err = a.refreshToken(); err != nil {
		a.Close()
		return nil, 0, 0, err
	}
	return a, from, to, nil
}

// rangeCheck parses --from and --to into from and to, and rejects a range
// that ends before it starts.
func rangeCheck(fromS, toS *string, from, to *int64) func() error {
	return func() (err error) {
		if *from, err = parseTime("from", *fromS); err != nil {
			return err
		}
		if *to, err = parseTime("to", *toS); err != nil {
			return err
		}
		if *from > *to {
			return usagef("--from is after --to; swap them")
		}
		return nil
	}
}
