package ops

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// probeTimeout bounds one Probe: well under a container healthcheck's timeout.
const probeTimeout = 2 * time.Second

// Probe asks the service listening on addr whether it is up: it GETs
// /healthz and returns an error unless the answer is 200 within two
// seconds. addr is the service's listen address (MINTGATE_HTTP_ADDR); a
// wildcard host such as ":8080" or "0.0.0.0:8080" is dialled on
// 127.0.0.1. It lets a distroless image, which has no curl, be its own
// container healthcheck.
func Probe(ctx context.Context, addr string) error {
	target, err := probeTarget(addr)
	if err != nil {
		return err
	}
	url := "http://" + target + "/healthz"
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", url, err)
	}
	// No proxy from the environment, no redirects, no idle connection left.
	client := &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: %s", url, res.Status)
	}
	return nil
}

// probeTarget is the host:port to dial for a listen address: its own host,
// or the IPv4 loopback when it listens on every interface (Go's "tcp"
// listener on "::" takes IPv4 too, and an IPv4-only container has no ::1).
func probeTarget(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("probe: listen address %q is not host:port (such as :8080)", addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
