package checks_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The parts of a NetworkPolicy the evaluator below reads.
type (
	netpol struct {
		Metadata struct{ Name string }
		Spec     struct {
			PodSelector labelSelector `yaml:"podSelector"`
			PolicyTypes []string      `yaml:"policyTypes"`
			Ingress     []struct {
				From []struct {
					NamespaceSelector *labelSelector `yaml:"namespaceSelector"`
					PodSelector       *labelSelector `yaml:"podSelector"`
				}
				Ports []struct{ Port any }
			}
		}
	}
	labelSelector struct {
		MatchLabels      map[string]string `yaml:"matchLabels"`
		MatchExpressions []struct {
			Key, Operator string
			Values        []string
		} `yaml:"matchExpressions"`
	}
	// endpoint is a pod: its namespace, its labels, and for a destination
	// the port asked for (name and number).
	endpoint struct {
		namespace string
		labels    map[string]string
		portName  string
		port      int
	}
)

func (s labelSelector) matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, ok := labels[e.Key]
		switch e.Operator {
		case "In":
			if !ok || !slices.Contains(e.Values, v) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		default:
			panic("labelSelector: operator " + e.Operator + " not evaluated by the test")
		}
	}
	return true
}

// loadPolicies reads the NetworkPolicies of a kustomization folder; they
// apply in its namespace.
func loadPolicies(t *testing.T, dir string) []netpol {
	t.Helper()
	var pols []netpol
	files, _ := filepath.Glob(filepath.Join(root(t), dir, "*.yaml"))
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(r)
		for {
			var doc struct {
				Kind string
			}
			var node yaml.Node
			err := dec.Decode(&node)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := node.Decode(&doc); err != nil || doc.Kind != "NetworkPolicy" {
				continue
			}
			var p netpol
			if err := node.Decode(&p); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			pols = append(pols, p)
		}
		r.Close()
	}
	return pols
}

// allowed evaluates ingress from src to dst as Kubernetes does: a pod no
// policy selects takes everything; otherwise a connection needs a rule of a
// selecting policy whose peer and port match.
func allowed(pols []netpol, policyNS string, src, dst endpoint) bool {
	if dst.namespace != policyNS {
		panic("allowed: the destination is in another namespace")
	}
	nsLabels := func(ns string) map[string]string { return map[string]string{"kubernetes.io/metadata.name": ns} }
	selected := false
	for _, p := range pols {
		if !p.Spec.PodSelector.matches(dst.labels) || !slices.Contains(p.Spec.PolicyTypes, "Ingress") {
			continue
		}
		selected = true
		for _, rule := range p.Spec.Ingress {
			portOK := len(rule.Ports) == 0 || slices.ContainsFunc(rule.Ports, func(rp struct{ Port any }) bool {
				return fmt.Sprint(rp.Port) == dst.portName || fmt.Sprint(rp.Port) == fmt.Sprint(dst.port)
			})
			peerOK := len(rule.From) == 0
			for _, peer := range rule.From {
				nsOK := src.namespace == policyNS
				if peer.NamespaceSelector != nil {
					nsOK = peer.NamespaceSelector.matches(nsLabels(src.namespace))
				}
				podOK := peer.PodSelector == nil || peer.PodSelector.matches(src.labels)
				if nsOK && podOK {
					peerOK = true
				}
			}
			if portOK && peerOK {
				return true
			}
		}
	}
	return !selected
}

func pod(ns, name string) endpoint {
	return endpoint{namespace: ns, labels: map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "mintgate"}}
}

func (e endpoint) on(name string, port int) endpoint { e.portName, e.port = name, port; return e }

// TestNetworkPolicies: the signer's API is reachable from the ingress
// controller alone, every /metrics (the signer's ops port) from monitoring
// alone, nothing else reaches mintgate's pods; Redis and NATS take only
// mintgate's services (and their own peers), their monitoring only
// monitoring; clamd takes the completer alone, on its port alone.
func TestNetworkPolicies(t *testing.T) {
	base := loadPolicies(t, k8sBase)
	data := loadPolicies(t, "deploy/k8s/data")
	ingress := pod("ingress-nginx", "ingress-nginx")
	prometheus := pod("monitoring", "prometheus")
	stranger := pod("default", "anything")
	neighbour := pod("mintgate", "debug")
	signerPod, completerPod, sweeperPod := pod("mintgate", signer), pod("mintgate", completer), pod("mintgate", sweeper)
	mintgatePods := []endpoint{signerPod, completerPod, sweeperPod}

	cases := []struct {
		name   string
		pols   []netpol
		ns     string
		dst    endpoint
		allow  []endpoint
		refuse []endpoint
	}{
		{"signer API", base, "mintgate", signerPod.on("http", 8080), []endpoint{ingress}, []endpoint{prometheus, stranger, neighbour, completerPod}},
		{"signer ops", base, "mintgate", signerPod.on("ops", 9080), []endpoint{prometheus}, []endpoint{ingress, stranger, neighbour}},
		{"completer metrics", base, "mintgate", completerPod.on("metrics", 8081), []endpoint{prometheus}, []endpoint{ingress, stranger, neighbour}},
		{"sweeper metrics", base, "mintgate", sweeperPod.on("metrics", 8082), []endpoint{prometheus}, []endpoint{ingress, stranger, neighbour}},
		{"redis", data, "mintgate-data", pod("mintgate-data", "redis").on("redis", 6379), mintgatePods,
			[]endpoint{ingress, prometheus, stranger, neighbour, pod("mintgate-data", "nats")}},
		{"nats clients", data, "mintgate-data", pod("mintgate-data", "nats").on("client", 4222), mintgatePods,
			[]endpoint{ingress, prometheus, stranger, neighbour, pod("mintgate-data", "redis")}},
		{"nats routes", data, "mintgate-data", pod("mintgate-data", "nats").on("cluster", 6222), []endpoint{pod("mintgate-data", "nats")},
			append([]endpoint{stranger, prometheus}, mintgatePods...)},
		// clamd has no authentication: only the completer's scans reach it.
		{"clamd", base, "mintgate", pod("mintgate", "clamd").on("clamd", clamdPort), []endpoint{completerPod},
			[]endpoint{signerPod, sweeperPod, ingress, prometheus, stranger, neighbour, pod("mintgate", operatorUser)}},
		{"clamd's other ports", base, "mintgate", pod("mintgate", "clamd").on("other", 8080), nil,
			[]endpoint{completerPod, prometheus, ingress}},
		{"nats monitoring", data, "mintgate-data", pod("mintgate-data", "nats").on("monitor", 8222), []endpoint{prometheus},
			append([]endpoint{stranger, ingress}, mintgatePods...)},
	}
	for _, tc := range cases {
		for _, src := range tc.allow {
			if !allowed(tc.pols, tc.ns, src, tc.dst) {
				t.Errorf("%s: %s/%s is refused", tc.name, src.namespace, src.labels["app.kubernetes.io/name"])
			}
		}
		for _, src := range tc.refuse {
			if allowed(tc.pols, tc.ns, src, tc.dst) {
				t.Errorf("%s: %s/%s gets in", tc.name, src.namespace, src.labels["app.kubernetes.io/name"])
			}
		}
	}
	if !strings.Contains(readFile(t, "deploy/k8s/data/kustomization.yaml"), "namespace: mintgate-data") {
		t.Error("deploy/k8s/data does not apply in mintgate-data, where the base's URLs point")
	}
}
