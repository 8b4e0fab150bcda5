package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/fleetsync/fleetsync/config"
)

// push sends the metrics to the Pushgateway when one is configured. A failed
// push is logged and never turns a good sync into a failed one.
//
// It pushes with POST, which replaces only the metric families it sends. A
// failed run leaves out fleetsync_last_success_timestamp_seconds, so the
// Pushgateway keeps the time of the last run that did succeed and the
// "no recent success" alert measures from it, as it does for the daemon.
func (a *app) push(succeeded bool) {
	u := a.cfg.Metrics.PushgatewayURL
	if u == "" {
		return
	}
	instance := a.cfg.Metrics.Instance
	if instance == "" {
		instance = hostname()
	}
	var g prometheus.Gatherer = a.reg
	if !succeeded {
		g = withoutFamily(a.reg, "fleetsync_last_success_timestamp_seconds")
	}
	p := push.New(u.Reveal(), a.cfg.Metrics.Job).Gatherer(g).Grouping("instance", instance)
	if shardOfConfig(a.cfg.Sync).Sharded() {
		// Shards push side by side, never over each other's group.
		p = p.Grouping("shard", strconv.Itoa(a.cfg.Sync.ShardIndex))
	}
	if err := p.Add(); err != nil {
		a.log.Warn("pushing metrics to the Pushgateway failed; the sync result stands", zap.String("pushgateway", u.String()), zap.Error(redactErr(err, u)))
	}
}

// withoutFamily gathers g less one metric family.
func withoutFamily(g prometheus.Gatherer, name string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if mf.GetName() != name {
				out = append(out, mf)
			}
		}
		return out, err
	})
}

// redactErr keeps the Pushgateway's credentials out of an error message.
func redactErr(err error, u config.SecretURL) error {
	return errors.New(strings.ReplaceAll(err.Error(), u.Reveal(), u.String()))
}
