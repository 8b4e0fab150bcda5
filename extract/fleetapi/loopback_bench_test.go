package fleetapi

import (
	"testing"
	"time"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

// BenchmarkSeriesOverLoopback measures Client.Series end to end against
// fleetsim: two variables (one of positions) of 200 000 points each in one
// request, streamed and decoded.
func BenchmarkSeriesOverLoopback(b *testing.B) {
	e := newConf(b, fleetsim.Options{Devices: 1, Variables: 4, Points: 200_000, Span: 48 * time.Hour})
	var ids []string
	for _, v := range e.variables("") {
		if v.Kind == "temperature" || v.Kind == "position" {
			ids = append(ids, v.ID)
		}
	}
	c := e.ordinary()
	req := SeriesRequest{VariableIDs: ids, Start: e.nowMs() - 72*3600*1000, End: e.nowMs()}
	b.ReportAllocs()
	var sink countingSink
	for b.Loop() {
		if err := c.Series(bg, req, &sink); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(sink.points)/b.Elapsed().Seconds(), "points/s")
}
