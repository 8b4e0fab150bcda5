package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fleetsync/fleetsync/state"
)

// noteWatermark says on w, when from lies before the settled watermark
// last published, that the command (what) may have changed hourly rows
// the watermark had settled: the contract lets only backfill, verify
// --repair and rollup do so, and has them say it. A watermark that
// cannot be read is not the command's failure; nothing is said then.
func (a *app) noteWatermark(ctx context.Context, w io.Writer, what string, from int64) {
	ms, ok, err := state.NewClickHouse(a.ch).Watermark(ctx)
	if err != nil || !ok || from >= ms {
		return
	}
	fmt.Fprintf(w, "note: %s reached before the settled watermark (%s): points and hourly rows stamped before it may have changed\n",
		what, time.UnixMilli(ms).UTC().Format(time.RFC3339))
}
