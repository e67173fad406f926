package checks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/testenv"
)

// eventsPermissions is the permissions block of docs/events.md, "Permissions
// of a consumer": the test runs what the page tells operators to deploy.
func eventsPermissions(t *testing.T) string {
	t.Helper()
	doc := readFile(t, "docs/events.md")
	m := regexp.MustCompile("(?s)## Permissions of a consumer.*?```conf\n(.*?)```").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/events.md: no conf block under \"Permissions of a consumer\"")
	}
	return m[1]
}

// startEventsNATS runs nats-server with the admin user (all rights, to
// create the stream and publish, as the completer and the operator step do)
// and the user "consumer" holding the permissions perms defines as
// THUMBNAILER_ACME_PERMISSIONS.
func startEventsNATS(t *testing.T, perms string) string {
	t.Helper()
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	conf := fmt.Sprintf(`listen: %q
jetstream { store_dir: %q }
%s
authorization {
  users: [
    { user: admin, password: admin-pass }
    { user: consumer, password: consumer-pass, permissions: $THUMBNAILER_ACME_PERMISSIONS }
  ]
}
`, addr, filepath.Join(dir, "js"), perms)
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.StartNATSConfig(t, filepath.Join(dir, "nats.conf"), addr, nil)
	return "nats://" + addr
}

// eventsJetStream connects as user, with the inbox prefix its
// permissions allow.
func eventsJetStream(t *testing.T, url, user, pass string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, pass), nats.CustomInboxPrefix("_INBOX.thumbnailer-acme"), nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestTenantConsumerPermissions (issue 17): docs/events.md recommended
// CONSUMER.CREATE.MINTGATE_UPLOADS.thumbnailer.>, under which a consumer
// picks its own filter and reads every tenant. The recipe it gives now pins
// the filter to one tenant: on a real nats-server its user consumes and
// acks acme's events, and is refused a consumer on globex's subject, on
// the whole stream, without a filter, or with a configuration whose filter
// differs from the one its allowed subject names.
func TestTenantConsumerPermissions(t *testing.T) {
	url := startEventsNATS(t, eventsPermissions(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	admin := eventsJetStream(t, url, "admin", "admin-pass")
	createEventsStream(ctx, t, admin)
	for _, tenant := range []string{"globex", "acme", "globex"} {
		body, _ := json.Marshal(map[string]string{"tenant": tenant})
		if _, err := admin.Publish(ctx, "mintgate.uploads.completed."+tenant, body); err != nil {
			t.Fatal(err)
		}
	}

	js := eventsJetStream(t, url, "consumer", "consumer-pass")
	cons, err := js.CreateOrUpdateConsumer(ctx, "MINTGATE_UPLOADS", jetstream.ConsumerConfig{
		Durable: "thumbnailer-acme", FilterSubject: "mintgate.uploads.completed.acme", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("the recipe's own consumer: %v", err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, m.Subject())
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("ack: %v", err)
		}
	}
	if batch.Error() != nil {
		t.Errorf("fetch: %v", batch.Error())
	}
	if len(got) != 1 || got[0] != "mintgate.uploads.completed.acme" {
		t.Errorf("consumed %q, want acme's one event", got)
	}
	if info, err := cons.Info(ctx); err != nil || info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("after the ack: %+v, %v", info, err)
	}

	// A denied publish gets no answer: each request can only time out.
	refused := func(what string, call func(context.Context) error) {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		if err := call(rctx); err == nil {
			t.Errorf("%s: allowed", what)
		}
	}
	// Each is refused by the permissions (or, for a filter that differs
	// from the subject's, by the server), and creates nothing.
	for name, cfg := range map[string]jetstream.ConsumerConfig{
		"another tenant":       {Durable: "thumbnailer-acme", FilterSubject: "mintgate.uploads.completed.globex"},
		"every tenant":         {Durable: "thumbnailer-acme", FilterSubject: "mintgate.uploads.completed.>"},
		"everything":           {Durable: "thumbnailer-acme", FilterSubject: ">"},
		"no filter":            {Durable: "thumbnailer-acme"},
		"two filters":          {Durable: "thumbnailer-acme", FilterSubjects: []string{"mintgate.uploads.completed.acme", "mintgate.uploads.completed.globex"}},
		"another durable":      {Durable: "thumbnailer-globex", FilterSubject: "mintgate.uploads.completed.globex"},
		"an ephemeral":         {FilterSubject: "mintgate.uploads.completed.globex"},
		"another name, acme's": {Durable: "spy", FilterSubject: "mintgate.uploads.completed.acme"},
	} {
		refused(name, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, "MINTGATE_UPLOADS", cfg)
			return err
		})
	}
	// The allowed subject with a configuration asking for more: the
	// server holds the configuration to the subject's filter.
	nc := eventsJetStream(t, url, "consumer", "consumer-pass").Conn()
	for _, widened := range []map[string]any{
		{"filter_subject": "mintgate.uploads.completed.>"},
		{"filter_subjects": []string{"mintgate.uploads.completed.acme", "mintgate.uploads.completed.globex"}},
	} {
		config := map[string]any{"durable_name": "thumbnailer-acme", "ack_policy": "explicit"}
		for k, v := range widened {
			config[k] = v
		}
		req, _ := json.Marshal(map[string]any{"stream_name": "MINTGATE_UPLOADS", "config": config})
		msg, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.MINTGATE_UPLOADS.thumbnailer-acme.mintgate.uploads.completed.acme", req)
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			Error *struct {
				Code        int    `json:"code"`
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil || resp.Error == nil {
			t.Errorf("%v on the tenant's subject was accepted: %s", widened, msg.Data)
		}
	}
	// Nor are the stream's messages readable directly.
	refused("stream info", func(ctx context.Context) error { _, err := js.Stream(ctx, "MINTGATE_UPLOADS"); return err })
	refused("direct get of a message", func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.MINTGATE_UPLOADS", []byte(`{"seq":1}`))
		return err
	})
	// What the consumers' configuration is now: still acme's filter only.
	ci, err := admin.Consumer(ctx, "MINTGATE_UPLOADS", "thumbnailer-acme")
	if err != nil {
		t.Fatal(err)
	}
	if f := ci.CachedInfo().Config.FilterSubject; f != "mintgate.uploads.completed.acme" {
		t.Errorf("the durable's filter is now %q", f)
	}
	stream, err := admin.Stream(ctx, "MINTGATE_UPLOADS")
	if err != nil {
		t.Fatal(err)
	}
	names := stream.ListConsumers(ctx)
	var all []string
	for ci := range names.Info() {
		all = append(all, ci.Name)
	}
	if strings.Join(all, ",") != "thumbnailer-acme" {
		t.Errorf("consumers of the stream: %q, want only thumbnailer-acme", all)
	}
}

// The recipe docs/events.md gave before issue 17, on the same server: a
// consumer of its durable chooses a filter of every tenant. This is the
// hole TestTenantConsumerPermissions proves closed.
func TestOldConsumerPermissionsReadEveryTenant(t *testing.T) {
	old := `THUMBNAILER_ACME_PERMISSIONS = {
  publish: { allow: [
    "$JS.API.CONSUMER.CREATE.MINTGATE_UPLOADS.thumbnailer-acme.>"
    "$JS.API.CONSUMER.MSG.NEXT.MINTGATE_UPLOADS.thumbnailer-acme"
    "$JS.ACK.MINTGATE_UPLOADS.thumbnailer-acme.>"
  ] }
  subscribe: { allow: ["_INBOX.thumbnailer-acme.>"] }
}
`
	url := startEventsNATS(t, old)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := eventsJetStream(t, url, "admin", "admin-pass")
	createEventsStream(ctx, t, admin)
	js := eventsJetStream(t, url, "consumer", "consumer-pass")
	if _, err := js.CreateOrUpdateConsumer(ctx, "MINTGATE_UPLOADS", jetstream.ConsumerConfig{
		Durable: "thumbnailer-acme", FilterSubject: "mintgate.uploads.completed.>", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatalf("the old recipe no longer lets a consumer read every tenant (%v): drop this test", err)
	}
}

// createEventsStream creates MINTGATE_UPLOADS as admin, waiting out a
// JetStream still starting.
func createEventsStream(ctx context.Context, t *testing.T, admin jetstream.JetStream) {
	t.Helper()
	for {
		_, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "MINTGATE_UPLOADS", Subjects: []string{"mintgate.uploads.completed.>"}})
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("create stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
