package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// verdictStack is a stack whose completer verifies content (the other
// journeys turn it off): the Uppy plugin's verdict and the long poll's
// timing need real rejections.
func verdictStack(t *testing.T) *stack {
	return newStack(t, stackOptions{
		Tiers: "anonymous=2:1,user=30:30/24h,tenant=1000:10",
		Extra: map[string]string{"MINTGATE_VERIFY": "on"},
	})
}

// longPoll is GET /uploads/{urlId}?wait=N: the status it answered and
// when, or the error of a broken connection.
func (s *stack) longPoll(bearer, urlID, wait string) (status string, at time.Time, err error) {
	req, _ := http.NewRequest(http.MethodGet, s.SignerURL+"/uploads/"+urlID+"?wait="+wait, nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := httpc.Do(req)
	if err != nil {
		return "", time.Now(), err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	at = time.Now()
	var out struct {
		Status string `json:"status"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	return out.Status, at, err
}

// TestStatusLongPollOnRealServers: on Redis, nats-server, versitygw,
// fauxqs and a verifying completer, a wait answers within 1 s of the
// verdict (seen by a poller reading every 50 ms beside it); a signer
// stopped mid-wait (SIGTERM) answers it at once with the status then, and
// one killed (SIGKILL) breaks the connection, which the client asks again
// once it is back: nothing was kept.
func TestStatusLongPollOnRealServers(t *testing.T) {
	s := verdictStack(t)
	tok := s.token(t, "js", "waiter")
	html := []byte("<!doctype html><html><body>not a png</body></html>\n")

	g := s.mustSign(t, tok, len(html))
	type answer struct {
		status string
		at     time.Time
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		st, at, err := s.longPoll(tok, g.URLID, "30")
		got <- answer{st, at, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if code := put(t, g, html); code != http.StatusOK {
		t.Fatalf("put: %d", code)
	}
	var seen time.Time
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s.status(t, tok, g.URLID) == "rejected" {
			seen = time.Now()
			break
		}
	}
	if seen.IsZero() {
		t.Fatal("never rejected")
	}
	a := <-got
	if a.err != nil || a.status != "rejected" {
		t.Fatalf("long poll: %q %v", a.status, a.err)
	}
	if late := a.at.Sub(seen); late > time.Second {
		t.Errorf("the long poll answered %v after the verdict was readable, want within 1 s", late)
	} else {
		t.Logf("the long poll answered %v after a poller saw the verdict (negative: before it)", late)
	}

	// SIGTERM mid-wait: answered at once, with the status then.
	pending := s.mustSign(t, tok, 10)
	go func() {
		st, at, err := s.longPoll(tok, pending.URLID, "30")
		got <- answer{st, at, err}
	}()
	time.Sleep(500 * time.Millisecond)
	stopped := time.Now()
	s.Signer.StopWith(syscall.SIGTERM)
	a = <-got
	if a.err != nil || a.status != "pending" || a.at.Sub(stopped) > 3*time.Second {
		t.Errorf("wait at SIGTERM: %q %v after %v, want pending at once", a.status, a.err, a.at.Sub(stopped))
	}
	s.Signer.Start()
	waitUp(t, s.SignerURL)

	// SIGKILL mid-wait: the connection breaks; asked again, it answers.
	go func() {
		st, at, err := s.longPoll(tok, pending.URLID, "30")
		got <- answer{st, at, err}
	}()
	time.Sleep(500 * time.Millisecond)
	s.Signer.Kill()
	if a = <-got; a.err == nil {
		t.Errorf("wait at SIGKILL answered %q; want a broken connection", a.status)
	}
	s.Signer.Start()
	waitUp(t, s.SignerURL)
	if st, _, err := s.longPoll(tok, pending.URLID, "1"); err != nil || st != "pending" {
		t.Errorf("asked again after the restart: %q %v", st, err)
	}
}

// waitUp waits for the signer's /healthz after a restart.
func waitUp(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if r, err := httpc.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatal("the signer did not come back")
}

// TestJSClientVerdict runs api/js/verify/verdict.test.mjs (the Mintgate
// plugin in @uppy/core 6.3.1 and 5.2.0) against a stack that verifies
// content: a real PNG gives postprocess-progress then upload-success
// whose body says completed; HTML named x.png gives upload-error
// type_mismatch and no upload-success.
func TestJSClientVerdict(t *testing.T) {
	node, dir := jsBuild(t)
	s := verdictStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", "--test-reporter=tap", "verify/verdict.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"MINTGATE_SIGNER_URL="+s.SignerURL,
		"MINTGATE_JWT_SECRET="+s.JWTSecret,
		"MINTGATE_VERDICT_STACK=1",
	)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	t.Logf("node --test:\n%s", buf.Bytes())
	if err != nil {
		t.Fatalf("the plugin's verdict tests failed: %v", err)
	}
	if bytes.Contains(buf.Bytes(), []byte("# skipped 0")) == false {
		t.Errorf("some verdict tests skipped")
	}
}
