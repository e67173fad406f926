package checks_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/mintgate/mintgate/shared/auth"
	"github.com/mintgate/mintgate/shared/config"
)

const k8sBase = "deploy/k8s/base"

// The parts of the Kubernetes objects the tests look at.
type (
	k8sObject struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string
		Metadata   struct {
			Name        string
			Labels      map[string]string
			Annotations map[string]string
		}
		Spec yaml.Node
	}
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	deployment struct {
		Replicas *int
		Selector selector
		Template struct {
			Metadata struct{ Labels map[string]string }
			Spec     podSpec
		}
	}
	podSpec struct {
		ServiceAccountName string `yaml:"serviceAccountName"`
		SecurityContext    struct {
			RunAsNonRoot   *bool `yaml:"runAsNonRoot"`
			RunAsUser      *int  `yaml:"runAsUser"`
			RunAsGroup     *int  `yaml:"runAsGroup"`
			FSGroup        *int  `yaml:"fsGroup"`
			SeccompProfile struct {
				Type string
			} `yaml:"seccompProfile"`
		} `yaml:"securityContext"`
		InitContainers []container `yaml:"initContainers"`
		Containers     []container
		Volumes        []volume
	}
	volume struct {
		Name     string
		EmptyDir *struct {
			SizeLimit string `yaml:"sizeLimit"`
		} `yaml:"emptyDir"`
		Secret *struct {
			SecretName  string `yaml:"secretName"`
			DefaultMode *int   `yaml:"defaultMode"`
			Items       []struct{ Key, Path string }
		}
		ConfigMap *struct {
			Name  string
			Items []struct{ Key, Path string }
		} `yaml:"configMap"`
	}
	container struct {
		Name    string
		Image   string
		Command []string
		Ports   []struct {
			Name          string
			ContainerPort int `yaml:"containerPort"`
		}
		EnvFrom []struct {
			ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
			SecretRef    *struct{ Name string } `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Env []struct {
			Name      string
			Value     string
			ValueFrom *struct {
				SecretKeyRef     *struct{ Name, Key string } `yaml:"secretKeyRef"`
				ResourceFieldRef *resourceFieldRef           `yaml:"resourceFieldRef"`
			} `yaml:"valueFrom"`
		}
		Resources struct {
			Requests, Limits map[string]string
		}
		VolumeMounts []struct {
			Name      string
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		StartupProbe   *probe `yaml:"startupProbe"`
		Security       struct {
			RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			Capabilities             struct{ Drop []string }
		} `yaml:"securityContext"`
	}
	probe struct {
		HTTPGet *struct {
			Path string
			Port any // a port name or number
		} `yaml:"httpGet"`
		TCPSocket *struct {
			Port any
		} `yaml:"tcpSocket"`
	}
	pdb struct {
		MinAvailable   any `yaml:"minAvailable"`
		MaxUnavailable any `yaml:"maxUnavailable"`
		Selector       selector
	}
	hpa struct {
		ScaleTargetRef struct{ APIVersion, Kind, Name string } `yaml:"scaleTargetRef"`
		MinReplicas    int                                     `yaml:"minReplicas"`
		MaxReplicas    int                                     `yaml:"maxReplicas"`
		Metrics        []struct {
			Type     string
			Resource struct {
				Name   string
				Target struct {
					Type               string
					AverageUtilization int `yaml:"averageUtilization"`
				}
			}
		}
	}
	service struct {
		Selector map[string]string
		Ports    []struct {
			Name       string
			Port       int
			TargetPort any `yaml:"targetPort"`
		}
	}
	kustomization struct {
		Namespace          string
		Resources          []string
		ConfigMapGenerator []struct {
			Name  string
			Envs  []string
			Files []string
		} `yaml:"configMapGenerator"`
		Images []kustomizeImage
	}
	kustomizeImage struct {
		Name   string
		NewTag string `yaml:"newTag"`
	}
)

// k8sBundle is the kustomize base: its kustomization, every object of its
// resources, and the environment files of its ConfigMap generators.
type k8sBundle struct {
	k       kustomization
	objects []k8sObject
	envs    map[string]map[string]string // ConfigMap name → its variables
}

func loadK8s(t *testing.T) *k8sBundle {
	t.Helper()
	dir := filepath.Join(root(t), k8sBase)
	b := &k8sBundle{envs: map[string]map[string]string{}}
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &b.k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	for _, res := range b.k.Resources {
		f, err := os.Open(filepath.Join(dir, res))
		if err != nil {
			t.Fatalf("kustomization resource: %v", err)
		}
		dec := yaml.NewDecoder(f)
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			if o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: an object without kind or name", res)
			}
			b.objects = append(b.objects, o)
		}
		f.Close()
	}
	for _, g := range b.k.ConfigMapGenerator {
		b.envs[g.Name] = map[string]string{}
		for _, e := range g.Envs {
			env, err := readEnvFile(filepath.Join(dir, e))
			if err != nil {
				t.Fatalf("configMapGenerator %s: %v", g.Name, err)
			}
			for k, v := range env {
				b.envs[g.Name][k] = v
			}
		}
	}
	return b
}

// readEnvFile reads KEY=value lines as kustomize does (# comments, blank lines).
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s:%d: not KEY=value", path, n)
		}
		if _, dup := env[k]; dup {
			return nil, fmt.Errorf("%s:%d: %s given twice", path, n, k)
		}
		env[k] = v
	}
	return env, sc.Err()
}

// get decodes the spec of the object of this kind and name into spec.
func (b *k8sBundle) get(t *testing.T, kind, name string, spec any) k8sObject {
	t.Helper()
	for _, o := range b.objects {
		if o.Kind == kind && o.Metadata.Name == name {
			if spec != nil {
				if err := o.Spec.Decode(spec); err != nil {
					t.Fatalf("%s %s: %v", kind, name, err)
				}
			}
			return o
		}
	}
	t.Fatalf("no %s %s in %s", kind, name, k8sBase)
	return k8sObject{}
}

func (b *k8sBundle) deployment(t *testing.T, name string) deployment {
	t.Helper()
	var d deployment
	if o := b.get(t, "Deployment", name, &d); o.APIVersion != "apps/v1" {
		t.Errorf("Deployment %s: apiVersion %s", name, o.APIVersion)
	}
	return d
}

func matches(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestKustomizeBase(t *testing.T) {
	b := loadK8s(t)
	if b.k.Namespace != "mintgate" {
		t.Errorf("namespace %q", b.k.Namespace)
	}
	b.get(t, "Namespace", "mintgate", nil)
	for _, name := range everyService {
		b.get(t, "ServiceAccount", "mintgate-"+name, nil)
		if !slices.ContainsFunc(b.k.Images, func(i kustomizeImage) bool {
			return i.Name == "mintgate/"+name && i.NewTag != "" && i.NewTag != "latest"
		}) {
			t.Errorf("kustomization: no pinned tag for image mintgate/%s", name)
		}
	}
}

// TestKustomizeDeployments: each service runs non-root on a read-only root,
// with no capabilities, bounded resources, and probes on its health routes.
func TestKustomizeDeployments(t *testing.T) {
	b := loadK8s(t)
	for _, name := range everyService {
		t.Run(name, func(t *testing.T) {
			d := b.deployment(t, name)
			pod := d.Template.Spec
			if !matches(d.Selector.MatchLabels, d.Template.Metadata.Labels) {
				t.Errorf("selector %v does not select the pod labels %v", d.Selector.MatchLabels, d.Template.Metadata.Labels)
			}
			if pod.ServiceAccountName != "mintgate-"+name {
				t.Errorf("service account %q, want mintgate-%s (its own IAM role)", pod.ServiceAccountName, name)
			}
			if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
				t.Error("pod securityContext.runAsNonRoot is not true")
			}
			if pod.SecurityContext.SeccompProfile.Type != "RuntimeDefault" {
				t.Error("pod seccompProfile is not RuntimeDefault")
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			if c.Image != "mintgate/"+name {
				t.Errorf("image %q, want mintgate/%s (tagged by the kustomization)", c.Image, name)
			}
			checkHardened(t, name, c)

			wantPorts := 1
			if name == signer {
				wantPorts = 2 // and ops, :9080, for /metrics and the admin API
				if len(c.Ports) != 2 || c.Ports[1].Name != "ops" || c.Ports[1].ContainerPort != 9080 {
					t.Errorf("ports %+v, want ops 9080 second", c.Ports)
				}
			}
			if len(c.Ports) != wantPorts || c.Ports[0].ContainerPort != httpPort[name] {
				t.Fatalf("ports %+v, want %d first", c.Ports, httpPort[name])
			}
			for path, p := range map[string]*probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
					t.Errorf("no httpGet probe on %s", path)
					continue
				}
				if port := fmt.Sprint(p.HTTPGet.Port); port != c.Ports[0].Name && port != fmt.Sprint(httpPort[name]) {
					t.Errorf("probe %s on port %q, the container listens on %s/%d", path, port, c.Ports[0].Name, httpPort[name])
				}
			}

			// The environment as the pod gets it: the generated ConfigMaps, and
			// secrets only by reference.
			env := map[string]string{}
			for _, from := range c.EnvFrom {
				if from.ConfigMapRef == nil {
					t.Errorf("envFrom %+v: only ConfigMaps (secrets by name, one key each)", from)
					continue
				}
				vars, ok := b.envs[from.ConfigMapRef.Name]
				if !ok {
					t.Errorf("envFrom %s: no such configMapGenerator", from.ConfigMapRef.Name)
				}
				for k, v := range vars {
					env[k] = v
				}
			}
			for _, e := range c.Env {
				switch {
				case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
					if e.ValueFrom.SecretKeyRef.Name != "mintgate-secrets" {
						t.Errorf("%s from secret %s, want mintgate-secrets", e.Name, e.ValueFrom.SecretKeyRef.Name)
					}
					v, ok := secretKeys[e.ValueFrom.SecretKeyRef.Key]
					if !ok {
						t.Errorf("%s from key %s, which the kustomization does not document", e.Name, e.ValueFrom.SecretKeyRef.Key)
					}
					env[e.Name] = v // provided by the Secret at run time
				case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
					r := e.ValueFrom.ResourceFieldRef
					if r.ContainerName != "" && r.ContainerName != c.Name {
						t.Errorf("%s from container %s's resources, not its own", e.Name, r.ContainerName)
					}
					v, ok := c.Resources.Limits[strings.TrimPrefix(r.Resource, "limits.")]
					if !strings.HasPrefix(r.Resource, "limits.") || !ok {
						t.Errorf("%s from %s, which the container does not set", e.Name, r.Resource)
					}
					env[e.Name] = v
				case strings.Contains(e.Name, "SECRET"):
					t.Errorf("%s is given in clear, not from the Secret", e.Name)
				default:
					env[e.Name] = e.Value
				}
			}
			if env["MINTGATE_TRUSTED_PROXIES"] == trustedProxiesPlaceholder {
				// What an overlay gives (TestKustomizeTrustsNamedProxiesOnly
				// checks the placeholder itself).
				env["MINTGATE_TRUSTED_PROXIES"] = exampleIngressProxies
			}
			checkServiceEnv(t, k8sBase, name, env)
			checkCredentials(t, k8sBase, name, env)
			checkFiles(t, name, pod, c, env)
		})
	}
	if d := b.deployment(t, signer); d.Replicas != nil {
		t.Error("signer: replicas is set, but the HorizontalPodAutoscaler owns the count")
	}
}

// exampleIngressProxies is what an overlay sets in place of the base's
// trustedProxiesPlaceholder: its ingress controller's subnet and address.
const exampleIngressProxies = "10.42.7.0/24,10.42.9.17"

// TestKustomizeTrustsNamedProxiesOnly (issue 17): the base trusted
// 10.0.0.0/8, every pod of a typical cluster, so any pod could write
// X-Forwarded-For and get a fresh anonymous bucket per request. Now it
// names no range: the signer, given the base as it is, refuses to start
// naming MINTGATE_TRUSTED_PROXIES, and the deploy checks refuse a missing,
// placeholder or wide trust wherever it appears.
func TestKustomizeTrustsNamedProxiesOnly(t *testing.T) {
	b := loadK8s(t)
	env := b.envs["mintgate-signer"]
	if got := env["MINTGATE_TRUSTED_PROXIES"]; got != trustedProxiesPlaceholder {
		t.Fatalf("base MINTGATE_TRUSTED_PROXIES = %q, want the placeholder %q an overlay must replace", got, trustedProxiesPlaceholder)
	}
	e := config.New(func(name string) string { return env[name] })
	auth.Read(e)
	if err := e.Err(); err == nil || !strings.Contains(err.Error(), "MINTGATE_TRUSTED_PROXIES") {
		t.Errorf("the signer's parser takes the base's placeholder: %v", err)
	}
	for proxies, ok := range map[string]bool{
		trustedProxiesPlaceholder: false,
		"":                        false,
		"10.0.0.0/8":              false, // the old base
		"10.42.7.0/24,0.0.0.0/0":  false,
		"fd00::/8":                false,
		exampleIngressProxies:     true,
		"173.245.48.0/20":         true, // a CDN's public range
	} {
		problem := trustProblem(map[string]string{"MINTGATE_IP_SOURCE": "xff", "MINTGATE_TRUSTED_PROXIES": proxies})
		if (problem == "") != ok {
			t.Errorf("trust %q: accepted %v, want %v (%s)", proxies, problem == "", ok, problem)
		}
	}
}

// secretKeys are the keys of the Secret mintgate-secrets an overlay
// provides, as kustomization.yaml lists them, with a value of their shape.
var secretKeys = map[string]string{
	"jwt-hs256-secret": strings.Repeat("s", 32),
	"ip-hash-secret":   strings.Repeat("s", 32),
	"grant-secret":     strings.Repeat("s", 64),
	"redis-url":        "rediss://mintgate:password@redis.mintgate-data.svc:6379/0",
	"nats-signer.nk":   "",
	"nats-sweeper.nk":  "",
	"nats-streams.nk":  "",
	// Standard Webhooks' form: whsec_ and the base64 of 32 random bytes.
	"webhook-secret":    "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)),
	"nats-completer.nk": "",
	// The upload records (optional keys: records off without them).
	"postgres-url":       "postgres://mintgate_service:password@postgres.example:5432/mintgate?sslmode=verify-full",
	"postgres-owner-url": "postgres://mintgate_owner:password@postgres.example:5432/mintgate?sslmode=verify-full",
}

// checkFiles: the files the environment names are mounted read-only in the
// pod: the NATS seed from the Secret, that service's own key only and
// readable by the pod's group alone, the CA from the ConfigMap mintgate-ca.
func checkFiles(t *testing.T, service string, pod podSpec, c container, env map[string]string) {
	t.Helper()
	mounted := func(file string) *volume {
		for _, m := range c.VolumeMounts {
			if rel, ok := strings.CutPrefix(file, m.MountPath+"/"); ok && m.ReadOnly {
				for i, v := range pod.Volumes {
					if v.Name == m.Name {
						found := false
						if v.Secret != nil {
							found = slices.ContainsFunc(v.Secret.Items, func(it struct{ Key, Path string }) bool { return it.Path == rel })
						}
						if v.ConfigMap != nil {
							found = slices.ContainsFunc(v.ConfigMap.Items, func(it struct{ Key, Path string }) bool { return it.Path == rel })
						}
						if found {
							return &pod.Volumes[i]
						}
					}
				}
			}
		}
		t.Errorf("%s: %s is not a file of a read-only volume", service, file)
		return nil
	}
	if f := env["MINTGATE_NATS_CREDS"]; f != "" {
		if v := mounted(f); v != nil {
			if v.Secret == nil || v.Secret.SecretName != "mintgate-secrets" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "nats-"+service+".nk" {
				t.Errorf("%s: MINTGATE_NATS_CREDS is not the key nats-%s.nk of mintgate-secrets, alone: %+v", service, service, v.Secret)
			} else if m := v.Secret.DefaultMode; m == nil || *m&0o007 != 0 {
				t.Errorf("%s: the NATS seed is readable by others (defaultMode %v)", service, m)
			} else if g := pod.SecurityContext.FSGroup; *m&0o040 != 0 && (g == nil || pod.SecurityContext.RunAsGroup == nil || *g != *pod.SecurityContext.RunAsGroup) {
				t.Errorf("%s: the NATS seed is group-readable, but the pod's fsGroup is not its group", service)
			}
		}
	}
	for _, name := range []string{"MINTGATE_REDIS_CA", "MINTGATE_NATS_CA"} {
		if f := env[name]; f != "" {
			if v := mounted(f); v != nil && (v.ConfigMap == nil || v.ConfigMap.Name != "mintgate-ca") {
				t.Errorf("%s: %s is not from the ConfigMap mintgate-ca", service, name)
			}
		}
	}
}

// TestKustomizeSecretsDocumented: every key of mintgate-secrets the pods
// use is listed in kustomization.yaml's comment, which operators read.
func TestKustomizeSecretsDocumented(t *testing.T) {
	text := readFile(t, k8sBase+"/kustomization.yaml")
	for key := range secretKeys {
		if !regexp.MustCompile(`(?m)^#\s+` + regexp.QuoteMeta(key) + `\s`).MatchString(text) {
			t.Errorf("kustomization.yaml does not list the Secret key %s", key)
		}
	}
}

// resourceFieldRef is the Downward API's view of a container's resources.
type resourceFieldRef struct {
	ContainerName string `yaml:"containerName"`
	Resource      string
	Divisor       string
}

// TestKustomizeGoRuntimeFollowsTheContainer: the signer's Go runtime knows
// its container's memory limit, in the bytes GOMEMLIMIT reads (a divisor
// such as 1Mi would hand it "256", which Go takes as 256 bytes), and a
// GOGC that parses (docs/production.md, "The Go runtime").
func TestKustomizeGoRuntimeFollowsTheContainer(t *testing.T) {
	c := loadK8s(t).deployment(t, signer).Template.Spec.Containers[0]
	env := map[string]string{}
	var limit *resourceFieldRef
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil {
			limit = e.ValueFrom.ResourceFieldRef
		}
	}
	switch {
	case limit == nil:
		t.Error("GOMEMLIMIT is not taken from the container's resources")
	case limit.Resource != "limits.memory":
		t.Errorf("GOMEMLIMIT from %s, want limits.memory", limit.Resource)
	case limit.Divisor != "" && limit.Divisor != "1":
		t.Errorf("GOMEMLIMIT divisor %s: GOMEMLIMIT without a unit is bytes, so the divisor must be 1", limit.Divisor)
	}
	if g, err := strconv.Atoi(env["GOGC"]); err != nil || g < 100 {
		t.Errorf("GOGC %q: want an integer of at least 100 (the default)", env["GOGC"])
	}
}

// TestKustomizeConfigHasNoSecrets: the ConfigMaps never carry a secret value.
func TestKustomizeConfigHasNoSecrets(t *testing.T) {
	for name, env := range loadK8s(t).envs {
		for k := range env {
			if strings.Contains(k, "SECRET") || strings.Contains(k, "AWS_ACCESS_KEY") || k == "MINTGATE_REDIS_URL" {
				t.Errorf("ConfigMap %s holds %s: it belongs in the Secret", name, k)
			}
		}
	}
}

// TestKustomizeAvailability: the signer is reachable, keeps serving through
// node drains, and scales on CPU; the consumers keep one replica through
// drains.
func TestKustomizeAvailability(t *testing.T) {
	b := loadK8s(t)

	var svc service
	b.get(t, "Service", signer, &svc)
	sd := b.deployment(t, signer)
	if !matches(svc.Selector, sd.Template.Metadata.Labels) {
		t.Errorf("Service signer selects %v, the pods are %v", svc.Selector, sd.Template.Metadata.Labels)
	}
	if len(svc.Ports) == 0 || (fmt.Sprint(svc.Ports[0].TargetPort) != "http" && fmt.Sprint(svc.Ports[0].TargetPort) != "8080") {
		t.Errorf("Service signer ports %+v: want targetPort http", svc.Ports)
	}

	for _, name := range []string{signer, sweeper} {
		var p pdb
		o := b.get(t, "PodDisruptionBudget", name, &p)
		if o.APIVersion != "policy/v1" {
			t.Errorf("PodDisruptionBudget %s: apiVersion %s", name, o.APIVersion)
		}
		if (p.MinAvailable == nil) == (p.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget %s: set one of minAvailable and maxUnavailable", name)
		}
		if !matches(p.Selector.MatchLabels, b.deployment(t, name).Template.Metadata.Labels) {
			t.Errorf("PodDisruptionBudget %s selects %v, not the %s pods", name, p.Selector.MatchLabels, name)
		}
	}

	var h hpa
	if o := b.get(t, "HorizontalPodAutoscaler", signer, &h); o.APIVersion != "autoscaling/v2" {
		t.Errorf("HorizontalPodAutoscaler signer: apiVersion %s, want autoscaling/v2", o.APIVersion)
	}
	if h.ScaleTargetRef.Kind != "Deployment" || h.ScaleTargetRef.Name != signer {
		t.Errorf("HPA scales %+v", h.ScaleTargetRef)
	}
	if h.MinReplicas < 2 || h.MaxReplicas < h.MinReplicas {
		t.Errorf("HPA replicas %d..%d: want at least 2 (one drain must not take the API down)", h.MinReplicas, h.MaxReplicas)
	}
	if len(h.Metrics) != 1 || h.Metrics[0].Type != "Resource" || h.Metrics[0].Resource.Name != "cpu" ||
		h.Metrics[0].Resource.Target.Type != "Utilization" || h.Metrics[0].Resource.Target.AverageUtilization == 0 {
		t.Errorf("HPA metrics %+v: want CPU utilisation", h.Metrics)
	}
}

// TestKustomizeOperatorStep: the base runs the operator step as a Job of
// its own identity, holding the streams user's seed, which no service pod
// mounts (a service's user cannot create a stream, the Job's can).
func TestKustomizeOperatorStep(t *testing.T) {
	b := loadK8s(t)
	var job struct {
		Template struct{ Spec podSpec }
	}
	if o := b.get(t, "Job", operatorUser, &job); o.APIVersion != "batch/v1" {
		t.Errorf("Job %s: apiVersion %s", operatorUser, o.APIVersion)
	}
	b.get(t, "ServiceAccount", "mintgate-"+operatorUser, nil)
	if !slices.ContainsFunc(b.k.Images, func(i kustomizeImage) bool {
		return i.Name == "mintgate/"+operatorUser && i.NewTag != "" && i.NewTag != "latest"
	}) {
		t.Errorf("kustomization: no pinned tag for image mintgate/%s", operatorUser)
	}
	seeds := func(p podSpec) []string {
		var keys []string
		for _, v := range p.Volumes {
			if v.Secret != nil {
				for _, it := range v.Secret.Items {
					keys = append(keys, it.Key)
				}
			}
		}
		return keys
	}
	if p := job.Template.Spec; p.ServiceAccountName != "mintgate-"+operatorUser || !slices.Equal(seeds(p), []string{"nats-streams.nk"}) {
		t.Errorf("Job %s: service account %q, secret keys %v; want mintgate-%s and nats-streams.nk alone", operatorUser, p.ServiceAccountName, seeds(p), operatorUser)
	}
	for _, name := range everyService {
		if keys := seeds(b.deployment(t, name).Template.Spec); slices.Contains(keys, "nats-streams.nk") {
			t.Errorf("%s mounts the operator step's seed", name)
		}
	}
}
