// Package service is the skeleton every mintgate service's main and run
// share: signals, the logger, the -healthcheck argument, flags. Its HTTP
// side, the ops endpoints and the one server that serves them, is
// shared/ops. A service's main is one call:
//
//	func main() { service.Main("sweeper", run) }
//
// and its run(ctx, args, getenv, stdout) lists its own parts, so that a
// test starts the whole service in-process with its own environment.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// Run is a service's run: it works until ctx ends, reading its
// configuration through getenv and logging to stdout.
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

// Main runs run with the process's arguments, environment and stdout until
// SIGINT or SIGTERM, which cancel its context (run then stops gracefully).
// An error is printed on stderr, prefixed with name, and exits 1; -h or
// -help, having printed the usage, exits 0.
func Main(name string, run Run) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Spec is what the skeleton knows of a service.
type Spec struct {
	Name     string              // signer, completer or sweeper: the log's service, the errors' prefix
	HTTPAddr string              // MINTGATE_HTTP_ADDR's default, which -healthcheck probes
	Flags    func(*flag.FlagSet) // defines the service's own flags; nil: none
}

// Start is the beginning of every run: it handles run's arguments and
// returns the service's logger. With -healthcheck (or healthcheck) first,
// it probes the service already listening instead; then, and when the
// flags are bad or -h asked for the usage, the logger is nil and run
// returns the error (nil for a healthy probe).
func Start(ctx context.Context, spec Spec, args []string, getenv func(string) string, stdout io.Writer) (*slog.Logger, error) {
	if IsHealthcheck(args) {
		return nil, Healthcheck(ctx, getenv, spec.HTTPAddr)
	}
	if err := Flags(spec.Name, args, stdout, spec.Flags); err != nil {
		return nil, err
	}
	return Logger(stdout, spec.Name), nil
}

// IsHealthcheck reports whether args (run's, the program's name first) ask
// for the container healthcheck: -healthcheck, or healthcheck.
func IsHealthcheck(args []string) bool {
	return len(args) > 1 && (args[1] == "-healthcheck" || args[1] == "healthcheck")
}

// Healthcheck probes /healthz of the service already listening on
// MINTGATE_HTTP_ADDR (def when unset), as read by getenv: the container
// healthcheck of a distroless image, which has no curl.
func Healthcheck(ctx context.Context, getenv func(string) string, def string) error {
	return ops.Probe(ctx, config.New(getenv).HTTPAddr(def))
}

// Flags parses run's arguments after the program's name with the flags
// define adds (nil: none), printing errors and the usage to stdout. Its
// error is flag.ErrHelp after -h, which Main takes for success.
func Flags(name string, args []string, stdout io.Writer, define func(*flag.FlagSet)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "usage: %s [-healthcheck] [flags] (configured by MINTGATE_* environment variables, see docs/configuration.md)\n", name)
		fs.PrintDefaults()
	}
	if define != nil {
		define(fs)
	}
	if len(args) == 0 {
		return nil
	}
	return fs.Parse(args[1:])
}

// Logger is the service's logger: JSON lines on stdout (run's, so a test
// reads them), each with service=name, and trace_id and span_id when
// logged with a context that holds a span (telemetry.LogHandler). Everything a service starts logs
// through it, never slog.Default().
func Logger(stdout io.Writer, name string) *slog.Logger {
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(stdout, nil))).With("service", name)
}
