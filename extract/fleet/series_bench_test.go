package fleet

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetsync/fleetsync/extract/fleetapi"
	"github.com/fleetsync/fleetsync/pipeline"
)

// pointCounter is the pipeline's side of the hot path reduced to nothing:
// it counts what reaches it, so that the benchmark measures the decoder and
// the adapter alone.
type pointCounter struct{ points, positions int }

func (c *pointCounter) Point(_ int, p pipeline.Point) error {
	c.points++
	if p.HasLat && p.HasLng {
		c.positions++
	}
	return nil
}

func (c *pointCounter) EndFrame(int, int) error { return nil }

// positionFleetBody is a raw-series response of vars per-variable frames of
// rows points each in fleetsim's mix: every fourth variable is a position,
// whose points carry lat and lng (and a speed) in their context; the others
// have empty contexts.
func positionFleetBody(vars []string, rows int, start int64) []byte {
	cols := make([]string, len(vars))
	frames := make([]string, len(vars))
	for i, v := range vars {
		cols[i] = fmt.Sprintf(`["timestamp","%s.value.value","%s.value.context"]`, v, v)
		points := make([]string, rows)
		for k := range points {
			ts := start + int64(rows-k)*1000
			points[k] = fmt.Sprintf(`[%d,%.2f,{}]`, ts, 20+float64(k%1000)/100)
			if i%4 == 3 {
				points[k] = fmt.Sprintf(`[%d,%d,{"lat":%.6f,"lng":%.6f,"speed":%d}]`, ts, 3+k%20, 48.1+float64(k%997)/1e4, 11.5-float64(k%991)/1e4, k%90)
			}
		}
		frames[i] = "[" + strings.Join(points, ",") + "]"
	}
	return []byte(`{"columns":[` + strings.Join(cols, ",") + `],"results":[` + strings.Join(frames, ",") + `]}`)
}

// BenchmarkSeriesToPipeline measures the path every synced point takes
// through this package: the client decodes a raw-series body and the
// adapter hands each point to the pipeline as a pipeline.Point with its
// position. One op is one whole response of 4 variables × 20,000 points.
func BenchmarkSeriesToPipeline(b *testing.B) {
	vars := []string{"6a1f0c0e9b3d4c2a1f0e9d80", "6a1f0c0e9b3d4c2a1f0e9d81", "6a1f0c0e9b3d4c2a1f0e9d82", "6a1f0c0e9b3d4c2a1f0e9d83"}
	const rows = 20_000
	const start = int64(1_760_000_000_000)
	body := positionFleetBody(vars, rows, start)
	req := fleetapi.SeriesRequest{VariableIDs: vars, Start: start, End: start + (rows+1)*1000, Limit: rows}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var c pointCounter
	for b.Loop() {
		if err := fleetapi.DecodeSeries(bytes.NewReader(body), req, frameSink{&c}); err != nil {
			b.Fatal(err)
		}
	}
	if c.positions*4 != c.points {
		b.Fatalf("%d positions among %d points, want a quarter", c.positions, c.points)
	}
	b.ReportMetric(float64(c.points)/b.Elapsed().Seconds(), "points/s")
}
