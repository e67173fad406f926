package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/ops"
)

// maxBody bounds one webhook body; versitygw sends one small record each.
const maxBody = 1 << 20

// sender is the one SQS call the bridge makes.
type sender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// handler receives versitygw's webhook posts.
type handler struct {
	log      *slog.Logger
	sqs      sender
	queueURL string
	token    []byte        // every post's ?token=
	timeout  time.Duration // per event, across retries
	refused  atomic.Int64  // posts without the token, for the log
}

func newHandler(log *slog.Logger, s sender, queueURL, token string) *handler {
	return &handler{log: log, sqs: s, queueURL: queueURL, token: []byte(token), timeout: sendTimeout}
}

// routes: the webhook on POST to any path, and GET /healthz.
func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", ops.Healthz())
	mux.HandleFunc("POST /", h.event)
	return mux
}

// event converts one versitygw event to AWS's format and sends it to SQS.
// It answers 200 once the message is in the queue, 400 for a body that is
// not a versitygw event and 502 when SQS did not take it in time.
func (h *handler) event(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		n := h.refused.Add(1)
		h.log.Warn("webhook post without the token refused", "remote", r.RemoteAddr, "origin", r.Header.Get("Origin"), "refused", n)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	n, err := fromVersity(body)
	if err != nil {
		h.log.Warn("not a versitygw event", "err", err, "body", truncate(body, 512))
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	msg, err := json.Marshal(n)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// Delivery outlives the request: versitygw hangs up after 3 s and never
	// retries, so giving up with it would lose the upload's event.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.timeout)
	defer cancel()
	if n.isTest() {
		// versitygw waits for this one at start-up; AWS also puts its test
		// event in the queue, so forward it, but with one quick try.
		ctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
	}
	id, err := h.send(ctx, string(msg), !n.isTest())
	if err != nil {
		h.log.Error("event not delivered to SQS", "err", err, "event", string(msg))
		if n.isTest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	attrs := []any{"messageId", id, "test", n.isTest()}
	for _, rec := range n.Records {
		attrs = append(attrs, "event", rec.EventName, "bucket", rec.S3.Bucket.Name, "key", rec.S3.Object.Key)
	}
	h.log.Info("event delivered", attrs...)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"messageId": id})
}

// authorized reports whether r carries the bridge's token, compared in
// constant time so that its answers do not spell the token out.
func (h *handler) authorized(r *http.Request) bool {
	got := []byte(r.URL.Query().Get("token"))
	return len(h.token) > 0 && subtle.ConstantTimeCompare(got, h.token) == 1
}

// sendBackoff spaces the retries of a send.
var sendBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second}

// send puts body in the queue, retrying with backoff until ctx ends when retry is set.
func (h *handler) send(ctx context.Context, body string, retry bool) (string, error) {
	for n := 1; ; n++ {
		out, err := h.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(h.queueURL), MessageBody: aws.String(body)})
		if err == nil {
			return aws.ToString(out.MessageId), nil
		}
		if !retry {
			return "", fmt.Errorf("send message: %w", err)
		}
		wait := sendBackoff.Delay(n)
		h.log.Warn("send message failed, retrying", "err", err, "in", wait)
		if serr := backoff.Sleep(ctx, wait); serr != nil {
			return "", fmt.Errorf("send message: %w (gave up: %w)", err, serr)
		}
	}
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
