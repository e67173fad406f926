package ops

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProbeTarget(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{":8080", "127.0.0.1:8080"},
		{"0.0.0.0:8081", "127.0.0.1:8081"},
		{"[::]:8082", "127.0.0.1:8082"},
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"10.1.2.3:8080", "10.1.2.3:8080"},
		{"[::1]:8080", "[::1]:8080"},
		{"localhost:8080", "localhost:8080"},
		{"signer:8080", "signer:8080"},
	} {
		if got, err := probeTarget(tc.addr); err != nil || got != tc.want {
			t.Errorf("probeTarget(%q) = %q, %v; want %q", tc.addr, got, err, tc.want)
		}
	}
	for _, addr := range []string{"", "8080", "127.0.0.1", ":", "127.0.0.1:"} {
		if got, err := probeTarget(addr); err == nil {
			t.Errorf("probeTarget(%q) = %q, want an error", addr, got)
		}
	}
}

// port is the port of a test server's address, as a listen address ":port".
func port(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	_, p, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ":" + p
}

func TestProbe(t *testing.T) {
	ctx := context.Background()
	up := httptest.NewServer(Handler(NewRegistry()))
	defer up.Close()
	if err := Probe(ctx, port(t, up)); err != nil {
		t.Errorf("healthy service: %v", err)
	}

	for name, h := range map[string]http.HandlerFunc{
		"503":      func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) },
		"redirect": func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) },
		"no route": http.NotFound,
	} {
		srv := httptest.NewServer(h)
		if err := Probe(ctx, port(t, srv)); err == nil {
			t.Errorf("%s: no error", name)
		}
		srv.Close()
	}

	down := httptest.NewServer(Handler(NewRegistry()))
	addr := port(t, down)
	down.Close()
	if err := Probe(ctx, addr); err == nil {
		t.Error("nothing listening: no error")
	}

	// A service that accepts but never answers fails by the deadline (the
	// caller's here, so the test need not wait out probeTimeout).
	hung := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hung }))
	defer slow.Close()
	defer close(hung)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Probe(short, port(t, slow))
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("hung service: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > probeTimeout {
		t.Errorf("hung service: Probe took %s", d)
	}
}
