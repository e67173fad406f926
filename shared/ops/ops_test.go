package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
