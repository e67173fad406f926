package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestConsumeSurvivesConsumerLeaderKill: on a three-node ledger, the node
// leading the sweepers' durable is SIGKILLed while a sweeper, connected to
// another node, waits on a pull. The pull died with that node and nothing
// tells the sweeper (its own connection is fine); only the missing idle
// heartbeats do. Grants that fall due afterwards must still be applied.
// Before the fix the sweeper's bounded waits restarted the heartbeat
// check every second, so it never fired, and every later grant waited
// forever: a chaos soak on R3 ended with 5,631 grants never refunded.
func TestConsumeSurvivesConsumerLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cluster := testenv.StartNATSCluster(t, 3)
	dial(t, cluster.URL(), Config{Replicas: 3}) // creates the stream
	_, js := connect(t, cluster.URL())

	// Create the durable as the sweeper will, then find its leader and
	// connect the sweeper to a node that is not it.
	leader := consumerLeader(t, js)
	var sweeperURL string
	var victim *testenv.NATS
	for i, n := range cluster.Nodes {
		if fmt.Sprintf("n%d", i+1) == leader {
			victim = n
		} else if sweeperURL == "" {
			sweeperURL = n.URL()
		}
	}
	if victim == nil {
		t.Fatalf("no node is named %q", leader)
	}
	l := dial(t, sweeperURL, Config{Replicas: 3})
	rec := newRecorder()
	consume(t, l, rec.handle, WithObserver(rec.observe), WithTrimInterval(0))

	// One grant proves the pull works; then wait until the sweeper's
	// next pull is parked on the leader.
	_, pub := connect(t, sweeperURL)
	dueGrant(t, pub, "before")
	waitFor(t, 10*time.Second, "the first grant applied", func() bool { return rec.count(Acked) == 1 })
	waitFor(t, 10*time.Second, "a pull waiting on the leader", func() bool {
		c, err := js.Consumer(context.Background(), DefaultStream, "sweeper")
		return err == nil && c.CachedInfo().NumWaiting > 0
	})

	victim.Kill()
	t.Logf("killed %s, the durable's leader", leader)
	waitFor(t, 30*time.Second, "a new leader of the durable", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := pub.Consumer(ctx, DefaultStream, "sweeper")
		return err == nil && c.CachedInfo().Cluster != nil && c.CachedInfo().Cluster.Leader != "" && c.CachedInfo().Cluster.Leader != leader
	})
	const n = 20
	published := time.Now()
	for i := range n {
		publishWithRetry(t, pub, fmt.Sprintf("after-%02d", i))
	}
	// Generous: the heartbeat check needs two missed heartbeats; the
	// bound only tells "late" from "never".
	waitFor(t, 45*time.Second, "the grants due after the kill applied", func() bool { return rec.count(Acked) == 1+n })
	t.Logf("applied %v after the first publish", time.Since(published).Round(time.Millisecond))
}

// consumerLeader creates the sweepers' durable and answers the name of the
// node that leads it.
func consumerLeader(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	var leader string
	waitFor(t, 30*time.Second, "the durable and its leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := js.CreateOrUpdateConsumer(ctx, DefaultStream, jetstream.ConsumerConfig{
			Durable: "sweeper", FilterSubject: SubjectDue, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 5 * time.Second, MaxAckPending: 1000, MaxDeliver: -1,
		})
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			return false
		}
		leader = info.Cluster.Leader
		return true
	})
	return leader
}

// publishWithRetry publishes one due grant, retrying while the stream
// elects a new leader.
func publishWithRetry(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	body, err := Seal(testSecret, Batch{ID: "b-" + id, Grants: []Grant{testGrant(id, time.Now())}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "publishing "+id, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.Publish(ctx, SubjectDue, body)
		return err == nil
	})
}

// TestDialWaitsOutAClusterWithoutQuorum: a service that starts while its
// three-node ledger has lost two nodes (the cluster has no meta leader and
// answers "JetStream system temporarily unavailable", API error 10008, or
// a node answers the stream's info from what it stored) does not fail:
// Dial either waits or opens the ledger read-only, and once the nodes are
// back its grants are recorded. A chaos run on R3 (seed 240108) saw a
// signer restarted right after a nats node was killed exit on that
// answer, and not come back.
func TestDialWaitsOutAClusterWithoutQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cluster := testenv.StartNATSCluster(t, 3)
	dial(t, cluster.URL(), Config{Replicas: 3}) // the operator step, then a first service
	for _, n := range cluster.Nodes[1:] {
		n.Kill()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	type opened struct {
		l   *Client
		err error
	}
	done := make(chan opened, 1)
	start := time.Now()
	go func() {
		l, err := Dial(ctx, cluster.Nodes[0].URL(), Config{Replicas: 3, Secret: testSecret})
		done <- opened{l, err}
	}()
	var o opened
	select {
	case o = <-done:
		if o.err != nil {
			t.Fatalf("Dial failed while two of three nodes were down: %v; it should wait for them", o.err)
		}
	case <-time.After(3 * time.Second):
	}
	for _, n := range cluster.Nodes[1:] {
		n.Start()
	}
	if o.l == nil {
		if o = <-done; o.err != nil {
			t.Fatalf("Dial after the nodes came back: %v", o.err)
		}
	}
	defer o.l.Close()
	t.Logf("opened %v after the first try", time.Since(start).Round(time.Millisecond))
	waitFor(t, 60*time.Second, "a grant recorded once the nodes are back", func() bool {
		return o.l.Record(ctx, testGrant("after-quorum", time.Now().Add(time.Hour))) == nil
	})
}

// What a cluster answers during an election is waited out; anything else
// ends Dial at once. The first is what the chaos run's signer got: the
// real answer's shape, wrapped as ensureStream wraps it.
func TestPassing(t *testing.T) {
	notAvailable := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: create or update stream %s: %w", ErrUnavailable, DefaultStream, notAvailable), true},
		{fmt.Errorf("stream info: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("connect: %w", nats.ErrNoResponders), true},
		{fmt.Errorf("create: %w", jetstream.ErrStreamNameAlreadyInUse), false},
		{fmt.Errorf("create: %w", &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}), false},
		{context.Canceled, false},
	} {
		if got := passing(c.err); got != c.want {
			t.Errorf("passing(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
