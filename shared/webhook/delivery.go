package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/keys"
)

// The event types of the payload.
const (
	TypeCompleted = "upload.completed"
	TypeRejected  = "upload.rejected"
)

// Delivery is one event on its way to its endpoint: what the retry
// schedules and the failed records carry, and what the admin route lists.
type Delivery struct {
	// ID is the webhook-id, the same on every try and redelivery:
	// "msg_<urlId>_completed" or "msg_<urlId>_rejected".
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Type   string `json:"type"`
	// Timestamp is the event's time (completedAt, rejectedAt): the
	// payload's "timestamp".
	Timestamp time.Time `json:"timestamp"`
	// Event is the event as the stream MINTGATE_UPLOADS holds it: the
	// payload's "data". Stored with a retry or a failed delivery it is
	// what the admin route lists, never what a try sends: each try reads
	// the event again at EventSeq (reread.go).
	Event json.RawMessage `json:"event"`
	// EventSeq is the event's sequence in MINTGATE_UPLOADS, which only
	// the completer may write: the reference each try reads the event
	// from.
	EventSeq uint64 `json:"eventSeq,omitempty"`
	// Attempts is how many tries were made.
	Attempts int `json:"attempts"`
	// Busy is how many times in a row the delivery found its endpoint
	// saturated (no try made): its next wait doubles with it.
	Busy int `json:"busy,omitempty"`
	// URL is the endpoint of the last try, without credentials.
	URL string `json:"url,omitempty"`
	// LastStatus is the last try's HTTP status, 0 without an answer.
	LastStatus int `json:"lastStatus,omitempty"`
	// LastError is why the last try failed.
	LastError string `json:"lastError,omitempty"`
	// FailedAt is when the last try failed (failed records only).
	FailedAt *time.Time `json:"failedAt,omitempty"`
	// Trace is the upload's W3C traceparent, carried by the message's
	// header (never the body: the admin routes list the body).
	Trace string `json:"-"`
}

// Body is the request body: the Standard Webhooks payload. It is the same
// on every try, so a receiver may compare the bodies of one id.
func (d Delivery) Body() ([]byte, error) {
	return json.Marshal(struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{d.Type, d.Timestamp.UTC().Format(time.RFC3339Nano), d.Event})
}

// ID is the webhook-id of urlID's event of type typ.
func ID(urlID, typ string) string {
	return "msg_" + urlID + "_" + strings.TrimPrefix(typ, "upload.")
}

// errPoison is an event no delivery can come of (not JSON, no urlId, a
// subject of no tenant): terminated, never retried.
var errPoison = errors.New("webhooks: not an upload event")

// FromEvent is the first try's delivery of a message of MINTGATE_UPLOADS.
func FromEvent(msg jetstream.Msg) (Delivery, error) {
	var seq uint64
	var at time.Time
	if md, err := msg.Metadata(); err == nil {
		seq, at = md.Sequence.Stream, md.Timestamp
	}
	return fromEvent(msg.Subject(), msg.Data(), seq, at)
}

// fromEvent is the delivery of the event data stored on subj at sequence
// seq of MINTGATE_UPLOADS, at the time stored (the payload's timestamp
// when the event names none).
func fromEvent(subj string, data []byte, seq uint64, stored time.Time) (Delivery, error) {
	var ev struct {
		URLID       string    `json:"urlId"`
		Tenant      string    `json:"tenant"`
		CompletedAt time.Time `json:"completedAt"`
		RejectedAt  time.Time `json:"rejectedAt"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", errPoison, err)
	}
	d := Delivery{Tenant: ev.Tenant, Event: json.RawMessage(data), EventSeq: seq}
	switch {
	case strings.HasPrefix(subj, events.SubjectPrefix):
		d.Type, d.Timestamp = TypeCompleted, ev.CompletedAt
	case strings.HasPrefix(subj, events.RejectedPrefix):
		d.Type, d.Timestamp = TypeRejected, ev.RejectedAt
	default:
		return Delivery{}, fmt.Errorf("%w: subject %s", errPoison, subj)
	}
	if !keys.ValidTenant(ev.Tenant) || !strings.HasSuffix(subj, "."+ev.Tenant) || !token(ev.URLID) {
		return Delivery{}, fmt.Errorf("%w: tenant %q, urlId %q on %s", errPoison, ev.Tenant, ev.URLID, subj)
	}
	if d.Timestamp.IsZero() {
		d.Timestamp = stored
	}
	d.ID = ID(ev.URLID, d.Type)
	return d, nil
}

// parseDelivery reads a message of MINTGATE_WEBHOOKS.
func parseDelivery(b []byte) (Delivery, error) {
	var d Delivery
	if err := json.Unmarshal(b, &d); err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", errPoison, err)
	}
	if !keys.ValidTenant(d.Tenant) || !token(d.ID) || len(d.Event) == 0 {
		return Delivery{}, fmt.Errorf("%w: delivery %q of tenant %q", errPoison, d.ID, d.Tenant)
	}
	return d, nil
}

// parseOn reads a message of MINTGATE_WEBHOOKS stored on subj: its
// subject's tenant and webhook-id must be its body's (a delivery of one
// tenant published on another's subject is no delivery).
func parseOn(subj string, b []byte) (Delivery, error) {
	d, err := parseDelivery(b)
	if err != nil {
		return Delivery{}, err
	}
	if !strings.HasSuffix(subj, "."+d.Tenant+"."+d.ID) || strings.Count(subj, ".") != 4 {
		return Delivery{}, fmt.Errorf("%w: %w: delivery %q of tenant %q on subject %s", errPoison, errForged, d.ID, d.Tenant, subj)
	}
	return d, nil
}

// token reports whether s can be one subject token.
func token(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == '.' || r == '*' || r == '>' || r == 0x7f {
			return false
		}
	}
	return true
}
