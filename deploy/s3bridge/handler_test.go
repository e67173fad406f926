package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/mintgate/mintgate/shared/s3event"
)

// flakySender fails the first fails calls, then takes the message.
type flakySender struct {
	mu     sync.Mutex
	fails  int
	calls  int
	bodies []string
}

func (f *flakySender) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.fails {
		return nil, errors.New("connection refused")
	}
	f.bodies = append(f.bodies, aws.ToString(in.MessageBody))
	return &sqs.SendMessageOutput{MessageId: aws.String("m1")}, nil
}

func post(t *testing.T, h *handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.routes().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/events?token="+testToken, strings.NewReader(body)))
	return w
}

// testToken is the bridge's token in these tests.
const testToken = "a-bridge-token-of-32-characters!"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestEventIsRetriedUntilSQSTakesIt: an SQS hiccup does not lose the upload's event.
func TestEventIsRetriedUntilSQSTakesIt(t *testing.T) {
	s := &flakySender{fails: 2}
	w := post(t, newHandler(quiet(), s, "q", testToken), string(fixture(t, "versitygw-put.json")))
	if w.Code != http.StatusOK || s.calls != 3 || len(s.bodies) != 1 {
		t.Fatalf("status %d after %d calls", w.Code, s.calls)
	}
	n, err := s3event.Parse([]byte(s.bodies[0]))
	if err != nil || n.Records[0].EventName != "ObjectCreated:Put" {
		t.Fatalf("sent %s: %v", s.bodies[0], err)
	}
}

func TestEventNotDeliveredIs502(t *testing.T) {
	h := newHandler(quiet(), &flakySender{fails: 1 << 30}, "q", testToken)
	h.timeout = 300 * time.Millisecond
	if w := post(t, h, string(fixture(t, "versitygw-put.json"))); w.Code != http.StatusBadGateway {
		t.Fatalf("status %d", w.Code)
	}
}

// TestTestEventIsTriedOnce: versitygw's start-up test event never waits
// on retries, whatever SQS does.
func TestTestEventIsTriedOnce(t *testing.T) {
	s := &flakySender{fails: 1 << 30}
	w := post(t, newHandler(quiet(), s, "q", testToken), string(fixture(t, "versitygw-test-event.json")))
	if w.Code != http.StatusAccepted || s.calls != 1 {
		t.Fatalf("status %d after %d calls", w.Code, s.calls)
	}
	s = &flakySender{}
	if w := post(t, newHandler(quiet(), s, "q", testToken), string(fixture(t, "versitygw-test-event.json"))); w.Code != http.StatusOK ||
		!strings.Contains(s.bodies[0], `"Service":"Amazon S3"`) {
		t.Fatalf("status %d, sent %q", w.Code, s.bodies)
	}
}
