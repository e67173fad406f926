// Package ops serves what operators and orchestrators poll on every
// mintgate service: /healthz (the process is up), /readyz (its
// dependencies answer) and /metrics (Prometheus).
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness dependency, such as Redis or NATS.
type Check struct {
	Name string
	Ping func(ctx context.Context) error
}

// NewRegistry is a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Healthz answers 200 while the process runs.
func Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// Readyz answers 200 when every check passes within a second, else 503
// with {"status":"not ready","failed":["redis",…]}: the names of the
// failing checks and nothing more. An error's text holds internal
// addresses (dial tcp 10.0.3.7:6379: connect: …), and /readyz answers on
// the signer's public port.
func Readyz(checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		var failed []string
		for _, c := range checks {
			if err := c.Ping(ctx); err != nil {
				failed = append(failed, c.Name)
			}
		}
		if len(failed) == 0 {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "failed": failed})
	})
}

// Metrics serves the registry.
func Metrics(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// Handler is the three endpoints on one mux: the whole HTTP surface of the
// completer and the sweeper, and the signer's ops port (MINTGATE_OPS_ADDR),
// the only place it serves /metrics.
func Handler(reg *prometheus.Registry, checks ...Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", Healthz())
	mux.Handle("GET /readyz", Readyz(checks...))
	mux.Handle("GET /metrics", Metrics(reg))
	return mux
}

// shutdownTimeout is how long in-flight requests get to finish once the
// context of Serve or ServeAll ends (SIGTERM).
const shutdownTimeout = 15 * time.Second

// Endpoint is one listener of a service: the signer's API, or the ops
// handler of any service.
type Endpoint struct {
	Variable string // the variable that sets Addr, for errors and the log
	Addr     string
	Handler  http.Handler
}

// Serve runs h on addr until ctx ends, then shuts down gracefully.
func Serve(ctx context.Context, log *slog.Logger, addr string, h http.Handler) error {
	return ServeAll(ctx, log, Endpoint{Addr: addr, Handler: h})
}

// ServeAll runs every endpoint until ctx ends, then drains in-flight
// requests. It listens on all of them before serving any, so a bad address
// stops the service at start; one that fails later stops them all. Errors
// name the endpoint's variable.
func ServeAll(ctx context.Context, log *slog.Logger, eps ...Endpoint) error {
	lns := make([]net.Listener, 0, len(eps))
	for _, ep := range eps {
		ln, err := net.Listen("tcp", ep.Addr)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return ep.wrap(err)
		}
		lns = append(lns, ln)
	}
	srvs := make([]*http.Server, 0, len(eps))
	errc := make(chan error, len(eps))
	for i, ep := range eps {
		ln := lns[i]
		srv := &http.Server{
			Handler:           ep.Handler,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       15 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
		}
		srvs = append(srvs, srv)
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- ep.wrap(fmt.Errorf("serve: %w", err))
			}
		}()
		log.Info("http listening", "addr", ln.Addr().String(), "for", ep.Variable)
	}
	var failed error
	select {
	case failed = <-errc:
	case <-ctx.Done():
	}
	log.Info("shutting down")
	return shutdown(srvs, failed)
}

// shutdown drains srvs at once, within shutdownTimeout, and returns failed
// or else the first error of a shutdown.
func shutdown(srvs []*http.Server, failed error) error {
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	errs := make(chan error, len(srvs))
	for _, srv := range srvs {
		go func() { errs <- srv.Shutdown(sctx) }()
	}
	for range srvs {
		if err := <-errs; err != nil && failed == nil {
			failed = fmt.Errorf("shutdown: %w", err)
		}
	}
	return failed
}

// wrap names the endpoint's variable in err, when it has one.
func (ep Endpoint) wrap(err error) error {
	if ep.Variable == "" {
		return err
	}
	return fmt.Errorf("%s: %w", ep.Variable, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
