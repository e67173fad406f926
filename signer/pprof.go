package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/mintgate/mintgate/shared/auth"
)

// startPprof serves the runtime profiles of net/http/pprof on addr
// (MINTGATE_PPROF_ADDR) until ctx ends, on a listener of its own: off by
// default, loopback only, never on the API port. A CPU profile costs a few
// per cent while it runs and nothing otherwise. It fails at start when addr
// cannot be bound, like MINTGATE_HTTP_ADDR.
func startPprof(ctx context.Context, log *slog.Logger, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("MINTGATE_PPROF_ADDR: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	log.Info("pprof listening", "addr", ln.Addr().String())
	return nil
}

// loopbackAddr reports whether addr is host:port with a loopback host
// (127.0.0.0/8, ::1 or localhost); ":6060" would listen everywhere.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && auth.IsLoopbackHost(host)
}
