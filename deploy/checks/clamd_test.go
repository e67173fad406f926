package checks_test

import (
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/mintgate/mintgate/shared/testenv"
)

// clamdPort is clamd's TCP port, the Service's and the NetworkPolicy's.
const clamdPort = 3310

// defaultScanMax is MINTGATE_SCAN_MAX_BYTES's default (docs/configuration.md).
const defaultScanMax = 104857600

// TestKustomizeClamd (issue 30): the base runs clamd for the completer's
// verification gate: a hardened Deployment behind a Service on 3310, the
// completer pointed at that Service, and clamd configured to take a
// stream as long as the completer sends (or every larger upload would be
// held verifying).
func TestKustomizeClamd(t *testing.T) {
	b := loadK8s(t)
	d := b.deployment(t, "clamd")
	pod := d.Template.Spec
	if !matches(d.Selector.MatchLabels, d.Template.Metadata.Labels) {
		t.Errorf("clamd: selector %v does not select the pod labels %v", d.Selector.MatchLabels, d.Template.Metadata.Labels)
	}
	if d.Replicas == nil || *d.Replicas < 2 {
		t.Error("clamd: want at least 2 replicas: a clamd down holds every upload verifying")
	}
	sc := pod.SecurityContext
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.SeccompProfile.Type != "RuntimeDefault" {
		// The image's user is root: the restricted namespace admits the
		// pod only with a non-root uid named.
		t.Errorf("clamd: pod securityContext %+v: want runAsNonRoot, a non-root runAsUser and RuntimeDefault seccomp", sc)
	}
	if pod.ServiceAccountName != "mintgate-clamd" {
		t.Errorf("clamd: service account %q, want mintgate-clamd (no AWS role)", pod.ServiceAccountName)
	}
	b.get(t, "ServiceAccount", "mintgate-clamd", nil)
	if !slices.ContainsFunc(b.k.Images, func(i kustomizeImage) bool {
		return i.Name == "clamav/clamav" && i.NewTag != "" && i.NewTag != "latest" && !strings.HasSuffix(i.NewTag, "_base")
	}) {
		t.Error("kustomization: no pinned tag for clamav/clamav (one with signatures, not _base: the init container copies them)")
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		checkHardened(t, "clamd/"+c.Name, c)
		if c.Image != "clamav/clamav" {
			t.Errorf("clamd/%s: image %q, want clamav/clamav (tagged by the kustomization)", c.Name, c.Image)
		}
	}
	var clamd *container
	for i, c := range pod.Containers {
		if c.Name == "clamd" {
			clamd = &pod.Containers[i]
		}
	}
	if clamd == nil {
		t.Fatal("clamd: no container clamd")
	}
	if len(clamd.Ports) != 1 || clamd.Ports[0].ContainerPort != clamdPort {
		t.Errorf("clamd: ports %+v, want %d", clamd.Ports, clamdPort)
	}
	for what, p := range map[string]*probe{"readiness": clamd.ReadinessProbe, "liveness": clamd.LivenessProbe, "startup": clamd.StartupProbe} {
		if p == nil || p.TCPSocket == nil || (fmt.Sprint(p.TCPSocket.Port) != "clamd" && fmt.Sprint(p.TCPSocket.Port) != strconv.Itoa(clamdPort)) {
			t.Errorf("clamd: no %s probe on clamd's port", what)
		}
	}

	var svc service
	b.get(t, "Service", "clamd", &svc)
	if !matches(svc.Selector, d.Template.Metadata.Labels) {
		t.Errorf("Service clamd selects %v, the pods are %v", svc.Selector, d.Template.Metadata.Labels)
	}
	if len(svc.Ports) != 1 || svc.Ports[0].Port != clamdPort {
		t.Errorf("Service clamd ports %+v, want %d", svc.Ports, clamdPort)
	}
	var p pdb
	b.get(t, "PodDisruptionBudget", "clamd", &p)
	if !matches(p.Selector.MatchLabels, d.Template.Metadata.Labels) {
		t.Errorf("PodDisruptionBudget clamd selects %v, not the clamd pods", p.Selector.MatchLabels)
	}

	// The completer scans at the Service.
	env := b.envs["mintgate-completer"]
	host, port, err := net.SplitHostPort(env["MINTGATE_CLAMD_ADDR"])
	if err != nil || (host != "clamd" && !strings.HasPrefix(host, "clamd.")) || port != strconv.Itoa(svc.Ports[0].Port) {
		t.Errorf("completer: MINTGATE_CLAMD_ADDR %q, want the Service clamd:%d", env["MINTGATE_CLAMD_ADDR"], clamdPort)
	}
	scanMax := int64(defaultScanMax)
	if s := env["MINTGATE_SCAN_MAX_BYTES"]; s != "" {
		if scanMax, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("completer: MINTGATE_SCAN_MAX_BYTES %q", s)
		}
	}
	checkClamdConfig(t, b, pod, scanMax)
}

// checkClamdConfig: clamd.conf and freshclam.conf, from the generated
// ConfigMap the pod mounts, agree with the pod and the completer: clamd on
// its port, taking a stream of scanMax bytes, and both on the signatures'
// volume.
func checkClamdConfig(t *testing.T, b *k8sBundle, pod podSpec, scanMax int64) {
	t.Helper()
	files := map[string]string{}
	for _, g := range b.k.ConfigMapGenerator {
		if g.Name != "mintgate-clamav" {
			continue
		}
		for _, f := range g.Files {
			files[filepath.Base(f)] = readFile(t, filepath.Join(k8sBase, f))
		}
	}
	if !slices.ContainsFunc(pod.Volumes, func(v volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == "mintgate-clamav" }) {
		t.Error("clamd: the ConfigMap mintgate-clamav is not a volume of the pod")
	}
	clamd, fresh := clamavConf(files["clamd.conf"]), clamavConf(files["freshclam.conf"])
	if clamd == nil || fresh == nil {
		t.Fatalf("configMapGenerator mintgate-clamav: want clamd.conf and freshclam.conf, got %v", slices.Sorted(maps.Keys(files)))
	}
	if clamd["TCPSocket"] != strconv.Itoa(clamdPort) || clamd["Foreground"] != "yes" {
		t.Errorf("clamd.conf: TCPSocket %q, Foreground %q; want %d in the foreground", clamd["TCPSocket"], clamd["Foreground"], clamdPort)
	}
	for _, name := range []string{"StreamMaxLength", "MaxFileSize"} {
		if n, ok := clamavSize(clamd[name]); !ok || n < scanMax {
			t.Errorf("clamd.conf: %s %q is below MINTGATE_SCAN_MAX_BYTES %d: every larger upload would be held verifying", name, clamd[name], scanMax)
		}
	}
	if db := clamd["DatabaseDirectory"]; db == "" || db != fresh["DatabaseDirectory"] {
		t.Errorf("clamd reads signatures from %q, freshclam writes them to %q", db, fresh["DatabaseDirectory"])
	}
	for _, c := range pod.Containers {
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.MountPath == clamd["DatabaseDirectory"] && m.ReadOnly == (c.Name == "clamd")
		}
		if !mounted {
			t.Errorf("clamd/%s: the signatures' folder %s is not mounted (read-only for clamd, writable for freshclam)", c.Name, clamd["DatabaseDirectory"])
		}
	}
}

// checkHardened: a container's securityContext as the restricted Pod
// Security Standard and the house want it, and bounded resources.
func checkHardened(t *testing.T, name string, c container) {
	t.Helper()
	sc := c.Security
	for what, ok := range map[string]bool{
		"runAsNonRoot: true":              sc.RunAsNonRoot != nil && *sc.RunAsNonRoot,
		"readOnlyRootFilesystem: true":    sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem,
		"allowPrivilegeEscalation: false": sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		"capabilities.drop: [ALL]":        slices.Contains(sc.Capabilities.Drop, "ALL"),
	} {
		if !ok {
			t.Errorf("%s: container securityContext lacks %s", name, what)
		}
	}
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" || c.Resources.Limits[r] == "" {
			t.Errorf("%s: resources: %s request %q, limit %q", name, r, c.Resources.Requests[r], c.Resources.Limits[r])
		}
	}
}

// clamavConf reads a clamd.conf or freshclam.conf: "Name value" lines, #
// comments. nil for an empty text.
func clamavConf(text string) map[string]string {
	if text == "" {
		return nil
	}
	out := map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// clamavSize reads a clamd size: bytes, or a number with K or M (ClamAV's
// units: kibibytes and mebibytes).
func clamavSize(s string) (int64, bool) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err == nil
}

// TestClamdAlertsOnLimits (issue 36): every clamd configuration we ship
// sets AlertExceedsMax yes. Without it clamd answers OK for content it
// stopped scanning at a limit (a PDF stream inflating past MaxFileSize
// with EICAR at its end read completed); with it the answer is
// Heuristics.Limits.Exceeded.<limit> FOUND and the upload is rejected
// scan_limit. The compose stack's clamd is given its file by a mount.
func TestClamdAlertsOnLimits(t *testing.T) {
	up := readFile(t, "deploy/local/up.sh")
	_, upConf, _ := strings.Cut(up, `cat >"$stack/clamav/clamd.conf" <<CONF`)
	upConf, _, _ = strings.Cut(upConf, "\nCONF\n")
	configs := map[string]string{
		"deploy/k8s/base/clamav/clamd.conf": readFile(t, filepath.Join(k8sBase, "clamav/clamd.conf")),
		"deploy/compose/clamd.conf":         readFile(t, "deploy/compose/clamd.conf"),
		"deploy/local/up.sh's clamd.conf":   upConf,
		"shared/testenv's ClamdConfig":      testenv.ClamdConfig("/db", "127.0.0.1", 3310, 1<<20),
	}
	for name, text := range configs {
		conf := clamavConf(text)
		if conf == nil || conf["DatabaseDirectory"] == "" {
			t.Errorf("%s: not found or not a clamd.conf", name)
			continue
		}
		if conf["AlertExceedsMax"] != "yes" {
			t.Errorf("%s: AlertExceedsMax %q, want yes: past a limit clamd would answer OK for content it never scanned", name, conf["AlertExceedsMax"])
		}
	}
	p := loadCompose(t)
	svc, ok := p.Services["clamd"]
	if !ok {
		t.Fatal("compose: no service clamd")
	}
	if !slices.ContainsFunc(svc.Volumes, func(v types.ServiceVolumeConfig) bool {
		return strings.HasSuffix(v.Source, "deploy/compose/clamd.conf") && v.Target == "/etc/clamav/clamd.conf"
	}) {
		t.Errorf("compose: clamd does not mount deploy/compose/clamd.conf at /etc/clamav/clamd.conf: %+v", svc.Volumes)
	}
}
