package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/ops"
)

// /readyz names the failing checks and nothing more (issue 10, finding 4:
// it printed `dial tcp 127.0.0.1:45259: connect: connection refused`,
// the internal addresses of Redis and NATS, to anyone who asked).
func TestReadyzNamesFailingChecksOnly(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:45259: connect: connection refused")
	h := ops.Readyz(
		ops.Check{Name: "redis", Ping: func(context.Context) error { return refused }},
		ops.Check{Name: "nats", Ping: func(context.Context) error { return nil }},
		ops.Check{Name: "sqs", Ping: func(context.Context) error {
			return errors.New("https://sqs.eu-west-1.amazonaws.com/123456789012/uploads: AccessDenied")
		}},
	)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d %s", rec.Code, body)
	}
	var got struct {
		Status string   `json:"status"`
		Failed []string `json:"failed"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if got.Status != "not ready" || strings.Join(got.Failed, ",") != "redis,sqs" {
		t.Errorf("body %s: want not ready, failed [redis sqs]", body)
	}
	for _, leak := range []string{"127.0.0.1", "connect", "refused", "amazonaws", "123456789012", "AccessDenied"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("body %s contains %q", body, leak)
		}
	}
}

// ServeAll listens on every endpoint before it serves any: one that cannot
// listen stops the service at start, naming its variable, and leaves no
// other listening. Otherwise each serves until ctx ends.
func TestServeAll(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free := freeAddr(t)
	err = ops.ServeAll(context.Background(), log,
		ops.Endpoint{Variable: "MINTGATE_HTTP_ADDR", Addr: free, Handler: ops.Healthz()},
		ops.Endpoint{Variable: "MINTGATE_OPS_ADDR", Addr: taken.Addr().String(), Handler: ops.Healthz()})
	if err == nil || !strings.HasPrefix(err.Error(), "MINTGATE_OPS_ADDR: ") {
		t.Fatalf("a taken address: %v; want an error naming MINTGATE_OPS_ADDR", err)
	}
	if ln, err := net.Listen("tcp", free); err != nil {
		t.Errorf("the first endpoint still listens: %v", err)
	} else {
		ln.Close()
	}

	a, b := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ops.ServeAll(ctx, log, ops.Endpoint{Addr: a, Handler: ops.Healthz()}, ops.Endpoint{Addr: b, Handler: ops.Healthz()})
	}()
	for _, addr := range []string{a, b} {
		if err := waitOK("http://" + addr + "/healthz"); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("after ctx ended: %v", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitOK(url string) error {
	var err error
	for range 200 {
		var res *http.Response
		if res, err = http.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(res.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}
