package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// strictDecoder decodes Kubernetes objects of the kinds deploy/ ships into
// their Go API types, and fails on unknown or duplicate fields, the way a
// server-side apply with field validation would.
func strictDecoder(t testing.TB) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			t.Fatalf("build the decoding scheme: %v", err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// splitYAML returns the documents of a YAML stream, leaving out empty ones
// and ones that hold only comments.
func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split YAML documents: %w", err)
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", len(docs)+1, err)
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}

// decodeObjects strictly decodes every document of data (named by what in
// failures) into a typed Kubernetes object.
func decodeObjects(t testing.TB, dec runtime.Decoder, what string, data []byte) []runtime.Object {
	t.Helper()
	docs, err := splitYAML(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no Kubernetes object in it", what)
	}
	var objs []runtime.Object
	for i, doc := range docs {
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Errorf("%s, document %d: not a valid Kubernetes object: %v", what, i+1, err)
			continue
		}
		if gvk.Version == "" || gvk.Kind == "" {
			t.Errorf("%s, document %d: no apiVersion or kind", what, i+1)
			continue
		}
		objs = append(objs, obj)
	}
	return objs
}

// kustomizeBuild renders a kustomization directory in-process with the
// kustomize library, as `kustomize build dir` (or `kubectl apply -k`) would.
func kustomizeBuild(t testing.TB, dir string) []byte {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: render YAML: %v", dir, err)
	}
	return out
}

// rendered sorts the objects of one kustomize build by kind.
type rendered struct {
	cronJobs        []*batchv1.CronJob
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	serviceAccounts []*corev1.ServiceAccount
	serviceMonitors []*monitoringv1.ServiceMonitor
	prometheusRules []*monitoringv1.PrometheusRule
}

// render builds dir with kustomize and decodes every object strictly.
func render(t testing.TB, dir string) rendered {
	t.Helper()
	var r rendered
	for _, obj := range decodeObjects(t, strictDecoder(t), "kustomize build "+dir, kustomizeBuild(t, dir)) {
		if !(sortInto(&r.cronJobs, obj) || sortInto(&r.deployments, obj) || sortInto(&r.services, obj) || sortInto(&r.configMaps, obj) ||
			sortInto(&r.serviceAccounts, obj) || sortInto(&r.serviceMonitors, obj) || sortInto(&r.prometheusRules, obj)) {
			t.Errorf("kustomize build %s: unexpected object %T", dir, obj)
		}
	}
	return r
}

// sortInto appends obj to list when it is of list's kind, and reports
// whether it was.
func sortInto[T any](list *[]T, obj any) bool {
	o, ok := obj.(T)
	if ok {
		*list = append(*list, o)
	}
	return ok
}

// metricInfo is one line of metrics.txt.
type metricInfo struct {
	Type   string
	Labels []string
}

// knownMetrics reads metrics.txt: the fleetsync metrics deploy/ may use.
func knownMetrics(t testing.TB) map[string]metricInfo {
	t.Helper()
	data, err := os.ReadFile("metrics.txt")
	if err != nil {
		t.Fatalf("read the metric list: %v", err)
	}
	known := map[string]metricInfo{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			t.Fatalf("metrics.txt:%d: want \"name type [label,...]\", got %q", n+1, line)
		}
		switch f[1] {
		case "counter", "gauge", "histogram":
		default:
			t.Fatalf("metrics.txt:%d: unknown metric type %q", n+1, f[1])
		}
		if _, dup := known[f[0]]; dup {
			t.Fatalf("metrics.txt:%d: %s listed twice", n+1, f[0])
		}
		mi := metricInfo{Type: f[1]}
		if len(f) == 3 {
			mi.Labels = strings.Split(f[2], ",")
		}
		known[f[0]] = mi
	}
	return known
}

// metricBase maps a series name used in PromQL to the metric it belongs to
// (a histogram's _bucket, _sum and _count series to the histogram), and
// reports whether that metric is known.
func metricBase(known map[string]metricInfo, name string) (string, bool) {
	if _, ok := known[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if found && known[base].Type == "histogram" {
			return base, true
		}
	}
	return "", false
}
