package main

import (
	"context"
	"fmt"
	"time"
)

// cmdRollup rebuilds datapoints_hourly and datapoints_latest from
// datapoints FINAL over the range (AnalystTables.Rebuild): after a manual fix of
// datapoints, or to fill the tables on a warehouse that was synced before
// they existed. The cycles keep them exact from then on.
func cmdRollup(ctx context.Context, env *cliEnv, args []string) error {
	fs, cfgPath := configFlags(env, "fleetsync rollup --config FILE --from T --to T")
	fromS := fs.String("from", "", "start of the range, inclusive (RFC 3339 or POSIX ms); whole hours are rebuilt")
	toS := fs.String("to", "", "end of the range, inclusive (RFC 3339 or POSIX ms)")
	var from, to int64
	a, err := start(ctx, env, fs, cfgPath, args, false, rangeCheck(fromS, toS, &from, &to))
	if err != nil {
		return err
	}
	defer a.Close()
	began := time.Now()
	if err := a.ch.Schema().Migrate(ctx); err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	n, err := a.ch.AnalystTables().Rebuild(ctx, from, to)
	if err != nil {
		return fmt.Errorf("%w; nothing already loaded is lost, run the same rollup again", err)
	}
	fmt.Fprintf(env.stdout, "rebuilt the rollups of %d variables over %s..%s in %s\n", n,
		time.UnixMilli(from).UTC().Format(time.RFC3339), time.UnixMilli(to).UTC().Format(time.RFC3339), time.Since(began).Round(time.Millisecond))
	a.noteWatermark(ctx, env.stdout, "the rollup", from)
	return nil
}
