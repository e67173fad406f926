package events

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestOpenOnlyReadsTheStream: Open never creates the stream (missing is
// ErrStreamMissing), the operator's EnsureStream does, idempotently,
// keeping a max age the operator set; a stream whose subjects miss the
// events is ErrStreamMisconfigured.
func TestOpenOnlyReadsTheStream(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := testenv.JetStream(t, srv.URL())
	ctx := context.Background()
	if _, err := Open(ctx, js, time.Minute); !errors.Is(err, ErrStreamMissing) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open without the stream: %v; want ErrStreamMissing", err)
	}
	if _, err := js.Stream(ctx, Stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Open created the stream (%v)", err)
	}
	if _, err := EnsureStream(ctx, js, 15*time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	sc := StreamConfig(15 * time.Minute)
	sc.MaxAge = 30 * 24 * time.Hour
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	info, err := EnsureStream(ctx, js, 15*time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 30*24*time.Hour || info.Config.Duplicates != 15*time.Minute {
		t.Errorf("after a second run: max age %v, window %v; want the operator's 720h and 15m", info.Config.MaxAge, info.Config.Duplicates)
	}
	p, err := Open(ctx, js, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if p.Window != 15*time.Minute {
		t.Errorf("window %v", p.Window)
	}

	sc.Subjects = []string{SubjectPrefix + "acme"}
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := p.Ping(ctx); !errors.Is(err, ErrStreamMisconfigured) {
		t.Errorf("Ping on a stream taking one tenant's events: %v; want ErrStreamMisconfigured", err)
	}
}
