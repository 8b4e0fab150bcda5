package deploy

import (
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// fleetsyncConfig mirrors the configuration keys of the contract
// (shared/spec/contract.md) plus the ones fleetsync adds, so that the shipped
// config.yaml is decoded as strictly as fleetsync itself decodes it: an
// unknown or misspelt key fails here before it fails in a pod.
type fleetsyncConfig struct {
	Source struct {
		BaseURL           string  `json:"base_url"`
		TokenFile         string  `json:"token_file"`
		Token             string  `json:"token"`
		Retention         string  `json:"retention"`
		Timeout           string  `json:"timeout"`
		RequestsPerSecond float64 `json:"requests_per_second"`
	} `json:"source"`
	Sync struct {
		Schedule            string `json:"schedule"`
		Lookback            string `json:"lookback"`
		RowsPerRequest      int    `json:"rows_per_request"`
		VariablesPerRequest int    `json:"variables_per_request"`
		MaxInFlight         int    `json:"max_in_flight"`
		BatchRows           int    `json:"batch_rows"`
		InsertWorkers       int    `json:"insert_workers"`
		ShardCount          int    `json:"shard_count"`
		ShardIndex          *int   `json:"shard_index"`
	} `json:"sync"`
	ClickHouse struct {
		Addr          []string `json:"addr"`
		Database      string   `json:"database"`
		Username      string   `json:"username"`
		Password      string   `json:"password"`
		PasswordFile  string   `json:"password_file"`
		Cluster       string   `json:"cluster"`
		ZookeeperPath string   `json:"zookeeper_path"`
	} `json:"clickhouse"`
	State struct {
		Backend string `json:"backend"`
	} `json:"state"`
	Metrics struct {
		Listen         string `json:"listen"`
		PushgatewayURL string `json:"pushgateway_url"`
		Job            string `json:"job"`
		Instance       string `json:"instance"`
		LagThreshold   string `json:"lag_threshold"`
	} `json:"metrics"`
	Log struct {
		Level  string `json:"level"`
		Format string `json:"format"`
	} `json:"log"`
}

// decodeConfig strictly decodes a fleetsync configuration file.
func decodeConfig(t testing.TB, what string, data []byte) fleetsyncConfig {
	t.Helper()
	var c fleetsyncConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		t.Fatalf("%s: not a valid fleetsync configuration: %v", what, err)
	}
	if c.Source.Token != "" || c.ClickHouse.Password != "" {
		t.Errorf("%s: holds a token or password; secrets belong in the Secret, referenced by token_file and password_file", what)
	}
	if c.Source.BaseURL == "" || c.Source.TokenFile == "" || c.ClickHouse.PasswordFile == "" || len(c.ClickHouse.Addr) == 0 || c.ClickHouse.Database == "" {
		t.Errorf("%s: base_url, token_file, clickhouse addr, database and password_file must all be set: %+v", what, c)
	}
	// Left empty, the grouping instance is the host name, which is the pod's
	// name and new for every Job: each run would leave a stale group behind
	// that the alerts would keep reading.
	if c.Metrics.PushgatewayURL != "" && c.Metrics.Instance == "" {
		t.Errorf("%s: metrics.pushgateway_url without metrics.instance: every CronJob run would push into a new Pushgateway group", what)
	}
	return c
}

// TestEveryManifestDecodesStrictly walks deploy/ and decodes every YAML file
// into the type it is for: Kubernetes objects into the k8s.io/api and
// prometheus-operator types, kustomizations into kustomize's own type, the
// fleetsync config, rule and rule-test files into their mirrors. Unknown
// fields are errors everywhere, and so is a YAML file nobody classified.
func TestEveryManifestDecodesStrictly(t *testing.T) {
	dec := strictDecoder(t)
	var objects int
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(p)
		if ext != ".yaml" && ext != ".yml" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch slashed := filepath.ToSlash(p); {
		case d.Name() == "kustomization.yaml":
			var k types.Kustomization
			if err := yaml.UnmarshalStrict(data, &k); err != nil {
				t.Errorf("%s: not a valid kustomization: %v", p, err)
			}
			if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
				t.Errorf("%s: apiVersion/kind = %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", p, k.APIVersion, k.Kind)
			}
		case d.Name() == "config.yaml":
			decodeConfig(t, p, data)
		case slashed == "prometheus/fleetsync-rules.yml":
			readRuleFile(t, p)
		case slashed == "prometheus/fleetsync-rules_test.yml":
			readRuleTests(t, p)
		default:
			objects += len(decodeObjects(t, dec, p, data))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk deploy/: %v", err)
	}
	// serviceaccount, cronjob, secret example, deployment, service,
	// servicemonitor, prometheusrule.
	if objects < 7 {
		t.Errorf("decoded %d Kubernetes objects under deploy/, want at least 7: is the walk finding the manifests?", objects)
	}
}

// TestStrictDecodingRejectsUnknownAndDuplicateFields shows that the decoder
// the other tests rely on really is strict: a misspelt field, which a lenient
// decoder (and an old kubectl) would silently drop, is an error.
func TestStrictDecodingRejectsUnknownAndDuplicateFields(t *testing.T) {
	dec := strictDecoder(t)
	for name, doc := range map[string]string{
		"misspelt field": `
apiVersion: batch/v1
kind: CronJob
metadata: {name: x}
spec:
  schedule: "* * * * *"
  concurencyPolicy: Forbid
  jobTemplate: {spec: {template: {spec: {containers: [{name: x, image: x}], restartPolicy: Never}}}}
`,
		"duplicate field": `
apiVersion: v1
kind: ConfigMap
metadata: {name: x}
data: {a: "1"}
data: {b: "2"}
`,
		"field of another kind": `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: x}
spec:
  selector: {}
  endpoints: [{port: metrics}]
  groups: []
`,
	} {
		if _, _, err := dec.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%s: decoded without error, want a strict decoding error", name)
		}
	}
}

// TestBaseRendersAHardenedCronJob builds deploy/base and checks the CronJob
// against what the operations guide promises: one run at a time, bounded in
// time and retries, non-root with a read-only root and no capabilities, the
// config from the generated ConfigMap and the credentials from the Secret.
func TestBaseRendersAHardenedCronJob(t *testing.T) {
	r := render(t, "base")
	if len(r.cronJobs) != 1 || len(r.configMaps) != 1 || len(r.serviceAccounts) != 1 ||
		len(r.deployments)+len(r.services)+len(r.serviceMonitors)+len(r.prometheusRules) != 0 {
		t.Fatalf("deploy/base renders %d CronJobs, %d ConfigMaps, %d ServiceAccounts, %d Deployments, %d Services, %d ServiceMonitors, %d PrometheusRules; want exactly one CronJob, ConfigMap and ServiceAccount",
			len(r.cronJobs), len(r.configMaps), len(r.serviceAccounts), len(r.deployments), len(r.services), len(r.serviceMonitors), len(r.prometheusRules))
	}
	cj := r.cronJobs[0]
	s := cj.Spec
	if s.ConcurrencyPolicy != "Forbid" {
		t.Errorf("CronJob concurrencyPolicy = %q, want Forbid", s.ConcurrencyPolicy)
	}
	if s.StartingDeadlineSeconds == nil || *s.StartingDeadlineSeconds <= 0 {
		t.Errorf("CronJob startingDeadlineSeconds unset")
	}
	if s.SuccessfulJobsHistoryLimit == nil || s.FailedJobsHistoryLimit == nil || *s.FailedJobsHistoryLimit < 1 {
		t.Errorf("CronJob history limits unset or keep no failed job")
	}
	js := s.JobTemplate.Spec
	if js.ActiveDeadlineSeconds == nil || *js.ActiveDeadlineSeconds <= 0 {
		t.Errorf("CronJob job activeDeadlineSeconds unset")
	}
	if js.BackoffLimit == nil {
		t.Errorf("CronJob job backoffLimit unset")
	}
	pod := js.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("CronJob pod restartPolicy = %q, want Never or OnFailure", pod.RestartPolicy)
	}
	checkPodHardening(t, "CronJob", pod)
	cfg := checkConfigWiring(t, "CronJob", pod, r.configMaps, "sync")

	// The schedule period is what fleetsync_schedule_interval_seconds reports
	// and what FleetsyncNoRecentSuccess counts in: both must agree.
	if s.Schedule != cfg.Sync.Schedule {
		t.Errorf("CronJob schedule %q differs from the config's sync.schedule %q", s.Schedule, cfg.Sync.Schedule)
	}
	if cfg.Metrics.PushgatewayURL == "" {
		t.Errorf("config has no metrics.pushgateway_url: a CronJob run's metrics would be lost")
	}

}

// TestDaemonOverlayReplacesTheCronJobWithAProbedDeployment builds
// deploy/daemon: the CronJob is gone, a single `fleetsync run` replica takes
// its place with probes on /healthz and /readyz, and the Service and
// ServiceMonitor line up with it port by port and label by label.
func TestDaemonOverlayReplacesTheCronJobWithAProbedDeployment(t *testing.T) {
	r := render(t, "daemon")
	if len(r.cronJobs) != 0 {
		t.Fatalf("deploy/daemon still renders %d CronJobs: daemon and CronJob would both sync", len(r.cronJobs))
	}
	if len(r.deployments) != 1 || len(r.services) != 1 || len(r.serviceMonitors) != 1 || len(r.configMaps) != 1 || len(r.serviceAccounts) != 1 {
		t.Fatalf("deploy/daemon renders %d Deployments, %d Services, %d ServiceMonitors, %d ConfigMaps, %d ServiceAccounts; want one of each",
			len(r.deployments), len(r.services), len(r.serviceMonitors), len(r.configMaps), len(r.serviceAccounts))
	}
	d := r.deployments[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("Deployment replicas = %v, want 1: two daemons would run every cycle twice", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != "Recreate" {
		t.Errorf("Deployment strategy = %q, want Recreate, so that old and new daemon never overlap", d.Spec.Strategy.Type)
	}
	pod := d.Spec.Template.Spec
	checkPodHardening(t, "Deployment", pod)
	cfg := checkConfigWiring(t, "Deployment", pod, r.configMaps, "run")

	c := pod.Containers[0]
	_, listenPort, err := net.SplitHostPort(cfg.Metrics.Listen)
	if err != nil {
		t.Fatalf("config metrics.listen %q: %v", cfg.Metrics.Listen, err)
	}
	var metricsPort *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == "metrics" {
			metricsPort = &c.Ports[i]
		}
	}
	if metricsPort == nil || strconv.Itoa(int(metricsPort.ContainerPort)) != listenPort {
		t.Fatalf("Deployment container ports %+v: want one named metrics on the config's metrics.listen port %s", c.Ports, listenPort)
	}
	for probeName, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[probeName]
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("Deployment has no HTTP %s probe", probeName)
			continue
		}
		if probe.HTTPGet.Path != want || probe.HTTPGet.Port != intstr.FromString("metrics") {
			t.Errorf("Deployment %s probe = %s on port %s, want %s on port metrics", probeName, probe.HTTPGet.Path, probe.HTTPGet.Port.String(), want)
		}
	}

	podLabels := d.Spec.Template.Labels
	for k, v := range d.Spec.Selector.MatchLabels {
		if podLabels[k] != v {
			t.Errorf("Deployment selector %s=%s does not match its own pod labels %v", k, v, podLabels)
		}
	}
	svc := r.services[0]
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service selector %s=%s does not match the daemon's pod labels %v", k, v, podLabels)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].TargetPort != intstr.FromString("metrics") {
		t.Errorf("Service ports = %+v, want one named metrics targeting the container port metrics", svc.Spec.Ports)
	}
	sm := r.serviceMonitors[0]
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %s=%s does not match the Service's labels %v", k, v, svc.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints = %+v, want /metrics on port metrics", sm.Spec.Endpoints)
	}
}

// TestPrometheusKustomizationRendersTheRules builds deploy/prometheus: one
// PrometheusRule carrying every alert of the plain rule file.
func TestPrometheusKustomizationRendersTheRules(t *testing.T) {
	r := render(t, "prometheus")
	if len(r.prometheusRules) != 1 {
		t.Fatalf("deploy/prometheus renders %d PrometheusRules, want 1", len(r.prometheusRules))
	}
	want := alertNames(readRuleFile(t, ruleFilePath).Groups)
	got := alertNames(r.prometheusRules[0].Spec.Groups)
	if !slices.Equal(got, want) {
		t.Errorf("rendered PrometheusRule alerts = %v, want those of %s: %v", got, ruleFilePath, want)
	}
}

// checkPodHardening checks the security and resource settings every
// fleetsync pod must have.
func checkPodHardening(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s pod: want runAsNonRoot and a non-zero runAsUser, got %+v", what, psc)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s pod: want seccompProfile RuntimeDefault", what)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s pod: mounts a ServiceAccount token it never uses", what)
	}
	if pod.ServiceAccountName != "fleetsync" {
		t.Errorf("%s pod: serviceAccountName = %q, want fleetsync", what, pod.ServiceAccountName)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s pod: %d containers, want 1", what, len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%s container: no securityContext", what)
	default:
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s container: allowPrivilegeEscalation not false", what)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s container: root filesystem not read-only", what)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s container: capabilities %+v, want drop ALL and add none", what, sc.Capabilities)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s container: privileged", what)
		}
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[res]
		lim, hasLim := c.Resources.Limits[res]
		if !hasReq || !hasLim {
			t.Errorf("%s container: %s request and limit must both be set (requests %v, limits %v)", what, res, c.Resources.Requests, c.Resources.Limits)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s container: %s request %s above its limit %s", what, res, req.String(), lim.String())
		}
	}
	memLimit := c.Resources.Limits[corev1.ResourceMemory]
	checkGoMemLimit(t, what, c.Env, memLimit)
	if c.Image == "" {
		t.Errorf("%s container: no image", what)
	}
}

// checkGoMemLimit checks that GOMEMLIMIT is set below the memory limit, with
// room for what the Go runtime does not count (stacks, the binary, cgo-free
// but still non-heap memory), yet not so low that the GC thrashes.
func checkGoMemLimit(t *testing.T, what string, env []corev1.EnvVar, limit resource.Quantity) {
	t.Helper()
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" })
	if i < 0 {
		t.Errorf("%s container: no GOMEMLIMIT", what)
		return
	}
	soft, err := parseGoMemLimit(env[i].Value)
	if err != nil {
		t.Errorf("%s container: GOMEMLIMIT %q: %v", what, env[i].Value, err)
		return
	}
	hard := limit.Value()
	if soft >= hard || soft < hard*7/10 {
		t.Errorf("%s container: GOMEMLIMIT %s is %d bytes, want between 70%% and 100%% of the memory limit %s (%d bytes)",
			what, env[i].Value, soft, limit.String(), hard)
	}
}

// parseGoMemLimit parses a GOMEMLIMIT value the way the Go runtime does: a
// byte count with an optional B, KiB, MiB, GiB or TiB suffix.
func parseGoMemLimit(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = num, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	return n * mult, nil
}

// checkConfigWiring follows the container's --config flag to the ConfigMap
// volume and key it names, decodes that config strictly, and checks that the
// token and password files it names are keys of the credentials Secret,
// mounted as a directory (kubelet does not refresh subPath mounts, and a
// rotated token must arrive without a restart). It returns the config.
func checkConfigWiring(t *testing.T, what string, pod corev1.PodSpec, cms []*corev1.ConfigMap, subcommand string) fleetsyncConfig {
	t.Helper()
	c := pod.Containers[0]
	args := append(slices.Clone(c.Command), c.Args...)
	if len(args) != 3 || args[0] != subcommand || args[1] != "--config" {
		t.Fatalf("%s container: command+args %q, want [%s --config FILE]", what, args, subcommand)
	}
	configPath := args[2]

	mountOf := func(volume string) *corev1.VolumeMount {
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == volume {
				return &c.VolumeMounts[i]
			}
		}
		return nil
	}
	var cfgData string
	var secretName, secretDir string
	for _, v := range pod.Volumes {
		m := mountOf(v.Name)
		if m == nil {
			continue
		}
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("%s container: volume %s mounted with subPath; kubelet never refreshes those", what, v.Name)
		}
		switch {
		case v.ConfigMap != nil && path.Dir(configPath) == m.MountPath:
			i := slices.IndexFunc(cms, func(cm *corev1.ConfigMap) bool { return cm.Name == v.ConfigMap.Name })
			if i < 0 {
				t.Fatalf("%s: config volume names ConfigMap %q, which the build does not contain", what, v.ConfigMap.Name)
			}
			data, ok := cms[i].Data[path.Base(configPath)]
			if !ok {
				t.Fatalf("%s: ConfigMap %s has no key %s for --config %s", what, cms[i].Name, path.Base(configPath), configPath)
			}
			cfgData = data
		case v.Secret != nil:
			if !m.ReadOnly {
				t.Errorf("%s container: Secret volume %s mounted writable", what, v.Name)
			}
			secretName, secretDir = v.Secret.SecretName, m.MountPath
		}
	}
	if cfgData == "" {
		t.Fatalf("%s: --config %s is not in a mounted ConfigMap", what, configPath)
	}
	cfg := decodeConfig(t, what+" config", []byte(cfgData))

	example := decodeObjects(t, strictDecoder(t), "base/secret.example.yaml", mustRead(t, "base/secret.example.yaml"))
	secret, ok := example[0].(*corev1.Secret)
	if !ok || len(example) != 1 {
		t.Fatalf("base/secret.example.yaml: want one Secret, got %d objects", len(example))
	}
	if secretName != secret.Name {
		t.Errorf("%s mounts Secret %q, but the example (and the docs) name %q", what, secretName, secret.Name)
	}
	for key, file := range map[string]string{"source.token_file": cfg.Source.TokenFile, "clickhouse.password_file": cfg.ClickHouse.PasswordFile} {
		if path.Dir(file) != secretDir {
			t.Errorf("%s: %s %s is not in the Secret's mount %s", what, key, file, secretDir)
		}
		if _, ok := secret.StringData[path.Base(file)]; !ok {
			t.Errorf("%s: %s %s names key %q, which the example Secret lacks", what, key, file, path.Base(file))
		}
	}
	return cfg
}

func mustRead(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return data
}

// TestExampleOverlayReplacesConfigAndPinsTheImage builds deploy/example, the
// overlay pattern docs/operations.md tells operators to keep: namespace set,
// image pinned, the config replaced by the overlay's own (and the CronJob
// pointing at that replacement), the rules labelled for their Prometheus.
func TestExampleOverlayReplacesConfigAndPinsTheImage(t *testing.T) {
	r := render(t, "example")
	if len(r.cronJobs) != 1 || len(r.configMaps) != 1 || len(r.prometheusRules) != 1 {
		t.Fatalf("deploy/example renders %d CronJobs, %d ConfigMaps, %d PrometheusRules; want one of each", len(r.cronJobs), len(r.configMaps), len(r.prometheusRules))
	}
	cj := r.cronJobs[0]
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	for _, o := range []interface{ GetNamespace() string }{cj, r.configMaps[0], r.prometheusRules[0], r.serviceAccounts[0]} {
		if o.GetNamespace() != "fleetsync" {
			t.Errorf("%T in namespace %q, want fleetsync", o, o.GetNamespace())
		}
	}
	if got := pod.Containers[0].Image; got != "ghcr.io/fleetsync/fleetsync:v0.1.0" {
		t.Errorf("image %q, want the pinned ghcr.io/fleetsync/fleetsync:v0.1.0", got)
	}
	cfg := checkConfigWiring(t, "example CronJob", pod, r.configMaps, "sync")
	want := decodeConfig(t, "example/config.yaml", mustRead(t, "example/config.yaml"))
	if cfg.Metrics.LagThreshold != want.Metrics.LagThreshold || len(cfg.ClickHouse.Addr) != len(want.ClickHouse.Addr) {
		t.Errorf("the CronJob reads a config with lag_threshold %q and %d ClickHouse addresses, want the overlay's (%q, %d)",
			cfg.Metrics.LagThreshold, len(cfg.ClickHouse.Addr), want.Metrics.LagThreshold, len(want.ClickHouse.Addr))
	}
	if cj.Spec.Schedule != cfg.Sync.Schedule {
		t.Errorf("CronJob schedule %q differs from the overlay config's sync.schedule %q", cj.Spec.Schedule, cfg.Sync.Schedule)
	}
	if r.prometheusRules[0].Labels["release"] == "" {
		t.Errorf("PrometheusRule labels %v lack the release label the example adds", r.prometheusRules[0].Labels)
	}
}
