package pipeline

import (
	"fmt"
	"runtime"
	"testing"
)

// benchSink builds a frameSink over vars variables as the engine does for
// one request, with a consumer that recycles handed-off chunks the way the
// loaders do after an INSERT.
func benchSink(vars int) (*frameSink, func()) {
	r := &reader{byID: map[string]*targetState{}, out: newChunks(4)}
	targets := make([]*targetState, vars)
	for i := range targets {
		v := Variable{
			ID:          fmt.Sprintf("%024x", 0x5f3a9c000000+i),
			DeviceID:    fmt.Sprintf("%024x", 0x7e11b0000000+i/4),
			DeviceLabel: fmt.Sprintf("tracker-%04d", i/4),
			Label:       [...]string{"temperature", "humidity", "battery", "position"}[i%4],
		}
		targets[i] = &targetState{Target: Target{Variable: v, End: 1 << 62}, reads: 1}
		r.byID[v.ID] = targets[i]
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range r.out.full {
			r.out.recycle(c)
		}
	}()
	s := &frameSink{r: r, req: &request{targets: targets}, chunk: r.out.get(), limit: 1 << 30}
	return s, func() { r.out.close(); <-done }
}

// BenchmarkBatchBuild measures the frameSink append path (decoded point →
// columnar pipeline.Batch with its lat/lng, chunk hand-off at frame
// boundaries): one op is one point. "plain" has only empty contexts;
// "fleet" is fleetsim's mix, where every fourth variable is a position
// whose context carries lat and lng.
func BenchmarkBatchBuild(b *testing.B) {
	const frameRows = 10000
	empty := []byte("{}")
	position := []byte(`{"lat":48.137154,"lng":11.576124}`)
	for _, tc := range []struct {
		name string
		ctx  func(frame int) []byte
	}{
		{"plain", func(int) []byte { return empty }},
		{"fleet", func(frame int) []byte {
			if frame%4 == 3 {
				return position
			}
			return empty
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, stop := benchSink(50)
			defer stop()
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				frame := (i / frameRows) % 50
				if err := s.Point(frame, Point{TsMs: int64(i), Value: 21.5, Context: tc.ctx(frame)}); err != nil {
					b.Fatal(err)
				}
				if (i+1)%frameRows == 0 {
					if err := s.EndFrame(frame, frameRows); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			// allocs/op rounds down to whole allocations; per point the
			// fraction matters (one context string per position point).
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/point")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "points/s")
		})
	}
}
