package fleetsim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// discardWriter is a ResponseWriter that throws the body away, so the
// benchmark measures the handler alone.
type discardWriter struct {
	h http.Header
	n int64
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(b []byte) (int, error) { d.n += int64(len(b)); return len(b), nil }

func benchRawSeries(b *testing.B, join bool, columns []string) {
	sim, err := New(Options{Seed: 3, Devices: 10, Variables: 5, Points: 100_000, Span: 30 * 24 * time.Hour, Tokens: []string{"t"}})
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	var ids []string
	for _, d := range sim.Devices() {
		for _, v := range d.Variables {
			ids = append(ids, v.ID)
		}
	}
	ids = ids[:10]
	body, _ := json.Marshal(map[string]any{"variables": ids, "columns": columns, "join_dataframes": join, "limit": 0, "start": sim.RetentionFloor().UnixMilli() + 1000})
	rows := 0
	for _, id := range ids {
		rows += sim.PointCount(id)
	}
	b.ResetTimer()
	var bytesOut int64
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", "/api/v1.6/data/raw/series", bytes.NewReader(body))
		req.Header.Set("X-Auth-Token", "t")
		w := &discardWriter{h: http.Header{}}
		sim.ServeHTTP(w, req)
		bytesOut += w.n
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.SetBytes(bytesOut / int64(b.N))
}

// BenchmarkRawSeries measures the raw-series handler, the source side of
// fleetsync's benchmarks: it must serve well over 3 M rows/s on one core.
func BenchmarkRawSeries(b *testing.B) {
	b.Run("frames/value+timestamp", func(b *testing.B) { benchRawSeries(b, false, []string{"value.value", "timestamp"}) })
	b.Run("frames/value+timestamp+context", func(b *testing.B) {
		benchRawSeries(b, false, []string{"value.value", "timestamp", "value.context"})
	})
	b.Run("joined/value+timestamp", func(b *testing.B) { benchRawSeries(b, true, []string{"value.value", "timestamp"}) })
}
