// Package deploy holds no program code. It is the Go module of fleetsync's
// deployment assets (Kubernetes manifests, Prometheus rules, the Grafana
// dashboard, the ClickHouse user, the Dockerfile), kept apart from the main
// module so that k8s.io/api and kustomize never enter fleetsync's own
// dependencies. Its tests check those assets with the real tools: strict
// decoding into the Kubernetes API types, in-process kustomize builds,
// promtool, and a throwaway ClickHouse 18.16 for the loader user.
//
// Run them with: cd deploy && go test ./...
package deploy
