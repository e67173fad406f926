package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/tiers"
)

// streamMsgs counts the messages in the ledger stream, -1 when it cannot.
func (s *stack) streamMsgs() int {
	s.t.Helper()
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		return -1
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		return -1
	}
	info, err := st.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}

// Swept grants, refunded or not, leave the ledger stream empty: its max
// age only guards what is pending.
func TestSweptGrantsLeaveTheLedgerEmpty(t *testing.T) {
	s := newStack(t, false)
	s.opts = append(s.opts, withTrimInterval(200*time.Millisecond))
	sw := s.start()
	s.setTokens(keys.Bucket(tenant, "u:gina"), 0)
	const n = 100
	expires := time.Now().Add(300 * time.Millisecond)
	for i := range n {
		g := newGrant(fmt.Sprintf("ret-%03d", i), tiers.User, "u:gina", expires)
		if i%10 == 0 { // some uploads landed
			s.rdb.Set(context.Background(), keys.Done(tenant, g.URLID), "1", time.Minute)
		}
		s.record(g)
	}
	if got := s.streamMsgs(); got != n {
		t.Fatalf("%d messages after recording %d grants", got, n)
	}
	waitFor(t, 20*time.Second, "every grant swept", func() bool { return sw.metric(t, "mintgate_sweeper_grants_swept_total") == n })
	waitFor(t, 10*time.Second, "an empty ledger stream", func() bool { return s.streamMsgs() == 0 })
	waitFor(t, 5*time.Second, "the consumer idle", s.idle)
	if got := s.refunded(); got != n-n/10 {
		t.Errorf("%d refunded, want %d", got, n-n/10)
	}
	if got := sw.metric(t, "mintgate_sweeper_ledger_trim_failures_total"); got != 0 {
		t.Errorf("%v trim failures", got)
	}
}
