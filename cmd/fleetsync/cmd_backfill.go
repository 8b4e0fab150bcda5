package main

import (
	"context"
	"fmt"
	"time"
)

func cmdBackfill(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync backfill --config FILE --from T --to T [--device KEY]...")
	fromS := fs.String("from", "", "start of the range, inclusive (RFC 3339 or POSIX ms)")
	toS := fs.String("to", "", "end of the range, inclusive (RFC 3339 or POSIX ms)")
	var devices stringList
	fs.Var(&devices, "device", "restrict to this device id or ~label (repeatable)")
	a, from, to, err := startForRange(ctx, env, fs, cfgPath, args, fromS, toS)
	if err != nil {
		return err
	}
	defer a.Close()
	stop := a.progress()
	sum, err := a.syncer.Backfill(ctx, from, to, devices)
	stop()
	a.logSummary("backfill", sum, err)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "backfilled %d points of %d variables over %s..%s in %s\n", sum.Points, sum.Targets,
		time.UnixMilli(from).UTC().Format(time.RFC3339), time.UnixMilli(to).UTC().Format(time.RFC3339), sum.Duration.Round(time.Millisecond))
	a.noteWatermark(ctx, env.stdout, "the backfill", from)
	return failures(sum)
}
