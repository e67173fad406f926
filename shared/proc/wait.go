package proc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// pollEvery is how often Wait asks whether the process is ready.
const pollEvery = 20 * time.Millisecond

// tailBytes is how much of a process's output an error quotes.
const tailBytes = 2000

// Wait polls ready until it holds (nil), the process exits, ctx ends or d
// passes; what names the awaited state in the error, which quotes the end
// of the process's output.
func (p *Process) Wait(ctx context.Context, d time.Duration, what string, ready func() bool) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return fmt.Errorf("%s is not running, so no %s", p.name(), what)
	}
	deadline := time.Now().Add(d)
	for !ready() {
		select {
		case <-done:
			return fmt.Errorf("%s exited before %s:\n%s", p.name(), what, p.Tail(tailBytes))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %s after %v:\n%s", p.name(), what, d, p.Tail(tailBytes))
		}
	}
	return nil
}

// WaitTCP waits (as Wait) until addr accepts connections.
func (p *Process) WaitTCP(ctx context.Context, d time.Duration, addr string) error {
	return p.Wait(ctx, d, "listener on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// readyClient is short-timed: a paused server must not hang a probe.
var readyClient = &http.Client{Timeout: time.Second}

// WaitHTTP waits (as Wait) until a GET of url answers 200; the error names
// the last answer.
func (p *Process) WaitHTTP(ctx context.Context, d time.Duration, url string) error {
	var last error
	err := p.Wait(ctx, d, "200 from "+url, func() bool {
		res, err := readyClient.Get(url)
		if err != nil {
			last = err
			return false
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			last = fmt.Errorf("status %d", res.StatusCode)
		}
		return res.StatusCode == http.StatusOK
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w\n(last answer: %v)", err, last)
	}
	return err
}

// FreeAddr is a loopback host:port that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
