package fleetapi

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleetsync/fleetsync/extract/fleetsim"
)

func TestAPageSizeTheServiceRejectsFallsBackToItsDocumentedDefaultOnce(t *testing.T) {
	sim, err := fleetsim.New(fleetsim.Options{Seed: 4, Devices: 120, Variables: 1, Points: 1, Tokens: []string{secret}, RejectPageSizeAbove: 100})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.Close() })
	c, logs, _ := newTestClient(t, srv.URL, func(cfg *Config) { cfg.PageSize = 1000 })
	for _, list := range []string{"devices", "variables"} {
		n := 0
		var err error
		if list == "devices" {
			err = c.Devices(context.Background(), func(Device) error { n++; return nil })
		} else {
			err = c.AllVariables(context.Background(), func(Variable) error { n++; return nil })
		}
		if err != nil || n != 120 {
			t.Fatalf("%s with page_size 1000 rejected above 100: %d items, %v; want all 120", list, n, err)
		}
	}
	var rejected, pages int
	for k, v := range sim.Counters() {
		switch {
		case strings.HasSuffix(k, " 400"):
			rejected += v
		case strings.HasSuffix(k, " 200"):
			pages += v
		}
	}
	// One 400, then 3 pages of 50 devices and 3 of 50 variables.
	if rejected != 1 || pages != 6 {
		t.Fatalf("%d requests rejected and %d pages served, want 1 and 6: %v", rejected, pages, sim.Counters())
	}
	if n := len(logs.FilterMessageSnippet("rejected the configured page size").All()); n != 1 {
		t.Fatalf("%d log lines about the rejected page size, want 1", n)
	}
}
