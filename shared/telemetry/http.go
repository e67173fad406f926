package telemetry

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Transport wraps base (http.DefaultTransport when nil): a request whose
// context holds a recording span is a client span (HTTP semantic
// conventions) of its own; with Inject its request carries the span's
// traceparent (a webhook's POST, so the app's handler joins the trace;
// never sent to S3, whose signature does not need it).
type Transport struct {
	Base   http.RoundTripper
	Inject bool
}

// RoundTrip is one request, traced when its context is.
func (t Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ctx, span := Start(r.Context(), r.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("server.address", r.URL.Hostname()),
			attribute.String("url.full", redacted(r)),
		))
	if !span.IsRecording() {
		return base.RoundTrip(r)
	}
	r = r.Clone(ctx)
	if t.Inject {
		Propagator.Inject(ctx, propagation.HeaderCarrier(r.Header))
	}
	if p := r.URL.Port(); p != "" {
		if n, err := strconv.Atoi(p); err == nil {
			span.SetAttributes(attribute.Int("server.port", n))
		}
	}
	resp, err := base.RoundTrip(r)
	if err != nil {
		End(span, err)
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, "")
	}
	span.End()
	return resp, nil
}

// redacted is r's URL without credentials or query (a presigned S3 URL's
// query is its signature).
func redacted(r *http.Request) string {
	u := *r.URL
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// Server starts the server span of r (HTTP semantic conventions),
// continuing its incoming traceparent; route is its route template. End it
// with EndServer.
func (p *Provider) Server(r *http.Request, route string) (*http.Request, trace.Span) {
	if !p.Enabled() {
		return r, noopSpan
	}
	ctx := Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := r.Method
	if route != "" {
		name += " " + route
	}
	ctx, span := p.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("http.route", route),
			attribute.String("url.path", r.URL.Path),
			attribute.String("url.scheme", scheme(r)),
			attribute.String("server.address", r.Host),
			attribute.String("user_agent.original", r.UserAgent()),
		))
	return r.WithContext(ctx), span
}

// EndServer ends a server span with the response's status (a 5xx marks it
// failed, as the conventions say).
func EndServer(span trace.Span, status int) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}
