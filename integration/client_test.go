package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/testenv"
)

var httpc = &http.Client{Timeout: 10 * time.Second}

// sign asks for a URL as the user; it returns the status and the body.
func (s *stack) sign(t *testing.T, bearer string, size int) (int, api.SignResponse, http.Header) {
	t.Helper()
	body := fmt.Sprintf(`{"contentType":"image/png","contentLength":%d}`, size)
	req, _ := http.NewRequest(http.MethodPost, s.SignerURL+"/uploads/sign", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	defer resp.Body.Close()
	var out api.SignResponse
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("sign body %s: %v", raw, err)
		}
	}
	return resp.StatusCode, out, resp.Header
}

// mustSign signs and requires a 201.
func (s *stack) mustSign(t *testing.T, bearer string, size int) api.SignResponse {
	t.Helper()
	code, out, _ := s.sign(t, bearer, size)
	if code != http.StatusCreated {
		t.Fatalf("sign: %d", code)
	}
	return out
}

// put uploads body to a signed URL with exactly the returned headers.
func put(t *testing.T, g api.SignResponse, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(g.Method, g.URL, bytes.NewReader(body))
	// Not Content-Length: net/http sends it from the body, as a browser does.
	req.Header.Set("Content-Type", g.Headers.ContentType)
	req.Header.Set("If-None-Match", g.Headers.IfNoneMatch)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// status is GET /uploads/{urlId} as the caller.
func (s *stack) status(t *testing.T, bearer, urlID string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.SignerURL+"/uploads/"+urlID, nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out.Status
}

// waitStatus polls the upload's status until it is want.
func (s *stack) waitStatus(t *testing.T, bearer, urlID, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	got := ""
	for time.Now().Before(deadline) {
		if got = s.status(t, bearer, urlID); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("upload %s: status %q after %v, want %q", urlID, got, within, want)
}

// redis is a client of the stack's Redis, to read what the services stored.
func (s *stack) redis(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// eventually polls cond until it holds.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, within)
}

// metric sums every sample of a counter or gauge a service exposes on
// /metrics; the test fails when the service has no such metric.
func metric(t *testing.T, baseURL, name string) float64 {
	t.Helper()
	return testenv.MetricSum(t, baseURL+"/metrics", name)
}
