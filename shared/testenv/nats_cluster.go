package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSCluster is nats-server nodes routed into one cluster with JetStream,
// each with its own store (sync_interval: always) and ports that survive
// Kill and Start, so a test can take one node down and bring it back.
type NATSCluster struct {
	Nodes []*NATS
}

// StartNATSCluster starts size nodes of the installed nats-server as one
// cluster and waits until JetStream answers through it (a meta leader was
// elected), so a stream with up to size replicas can be created at once.
func StartNATSCluster(tb testing.TB, size int) *NATSCluster {
	tb.Helper()
	bin := Binary(tb, "nats-server")
	routePorts := make([]int, size)
	routes := make([]string, size)
	for i := range routePorts {
		routePorts[i] = FreePort(tb)
		routes[i] = fmt.Sprintf("nats-route://%s", addr(routePorts[i]))
	}
	c := &NATSCluster{}
	for i := range size {
		extra := fmt.Sprintf("server_name: n%d\ncluster {\n  name: testenv\n  listen: %q\n  routes: [%s]\n}\n",
			i+1, addr(routePorts[i]), strings.Join(routes, ", "))
		c.Nodes = append(c.Nodes, startNATS(tb, bin, true, extra))
	}
	c.WaitJetStream(tb, 30*time.Second)
	return c
}

// URL is every node's nats:// URL, comma-separated, as clients take it.
func (c *NATSCluster) URL() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// WaitJetStream waits until JetStream answers an account info request
// through the cluster, within d.
func (c *NATSCluster) WaitJetStream(tb testing.TB, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		if last = c.jetStreamUp(); last == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, n := range c.Nodes {
		out := n.Output()
		if len(out) > 3000 {
			out = out[len(out)-3000:]
		}
		tb.Logf("testenv: node n%d of the NATS cluster (exited: %v) logged:\n%s", i+1, n.Exited(), out)
	}
	tb.Fatalf("testenv: JetStream of the NATS cluster %s did not answer within %v: %v", c.URL(), d, last)
}

func (c *NATSCluster) jetStreamUp() error {
	nc, err := nats.Connect(c.URL(), nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}
