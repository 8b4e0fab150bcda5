package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/pipelinetest"
)

// chunkBytes is the size of b's rows as RowBytes counts it, summed row by
// row here rather than read from b.Bytes, so that a chunk whose Bytes
// undercounted its rows would show.
func chunkBytes(b *pipeline.Batch) int {
	n := 0
	for i := range b.Len() {
		n += pipeline.RowBytes(&pipeline.Row{VariableID: b.VariableID[i], DeviceID: b.DeviceID[i], DeviceLabel: b.DeviceLabel[i],
			VariableLabel: b.VariableLabel[i], Context: b.Context[i]})
	}
	return n
}

func TestReaderChunksStayWithinTheirBytesWhateverTheRowSize(t *testing.T) {
	// Rows of 4 KiB contexts, frames of 20,000 rows: a chunk bounded by
	// its rows alone would hold 32k of them, 128 MiB, and with it the
	// writer's buffers (issue 26: contexts 5 times larger made a 20 M
	// backfill peak at 871 MiB).
	const vars, points, ctxBytes = 2, 20_000, 4 << 10
	fixed, targets := pipelinetest.Fixture(vars, points, 1_700_000_000_000)
	src := &pipelinetest.Source{}
	for _, tg := range targets {
		pts := fixed.Points(tg.Variable.ID)
		for i := range pts {
			ctx := fmt.Sprintf(`{"note":"%s"}`, bytes.Repeat([]byte{'a' + byte(i%26)}, ctxBytes-11))
			pts[i].Context = []byte(ctx)
		}
		src.SetVariable(tg.Variable)
		src.Add(tg.Variable.ID, pts...)
	}
	row := pipeline.RowBytes(&pipeline.Row{VariableID: targets[0].Variable.ID, DeviceID: targets[0].Variable.DeviceID,
		DeviceLabel: targets[0].Variable.DeviceLabel, VariableLabel: targets[0].Variable.Label, Context: string(src.Points(targets[0].Variable.ID)[0].Context)})

	var chunks, rows, largest, contexts int
	pipeline.ReadAlone(context.Background(), src, targets, pipeline.EngineOptions{RowsPerRequest: 50_000, VariablesPerRequest: vars, MaxInFlight: 1}, 0, func(b *pipeline.Batch) {
		chunks++
		rows += b.Len()
		largest = max(largest, chunkBytes(b))
		for i := range b.Len() {
			if len(b.Context[i]) == ctxBytes {
				contexts++
			}
		}
	})

	if rows != vars*points {
		t.Fatalf("the reader handed on %d rows in %d chunks, want %d", rows, chunks, vars*points)
	}
	if contexts != rows {
		t.Fatalf("%d of %d rows carried a %d-byte context: the test's rows are not what it means them to be", contexts, rows, ctxBytes)
	}
	// A chunk is handed on once it reaches maxChunkBytes: at most one row
	// past it.
	if limit := pipeline.MaxChunkBytes + row; largest > limit {
		t.Errorf("a chunk of %d bytes (%d rows of %d bytes) reached the loaders, want at most %d: the memory in flight grows with the rows' size",
			largest, largest/row, row, limit)
	}
	// The chunks are not cut needlessly small either: the bytes bound, not
	// a smaller one, decides.
	if want := vars * points * row / (pipeline.MaxChunkBytes + row); chunks > want+vars+1 {
		t.Errorf("%d chunks for %d rows of %d bytes, want about %d", chunks, rows, row, want)
	}
}

func TestBatchResetLetsGoOfItsContexts(t *testing.T) {
	// A pooled chunk must not keep the last contexts it held alive: with
	// rows bounded by bytes a chunk's next rows may be fewer, and the
	// slots past them would still point at the old strings.
	var b pipeline.Batch
	for i := range 100 {
		b.Append(pipeline.Row{VariableID: "v", TsMs: int64(i), Context: fmt.Sprintf(`{"i":%d}`, i)})
	}
	b.Truncate(40)
	for i, c := range b.Context[40:100] {
		if c != "" {
			t.Fatalf("after Truncate(40), slot %d still holds context %q", 40+i, c)
		}
	}
	b.Reset()
	for i, c := range b.Context[:100] {
		if c != "" {
			t.Fatalf("after Reset, slot %d still holds context %q", i, c)
		}
	}
}
