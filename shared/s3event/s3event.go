// Package s3event reads the S3 event notifications AWS sends to SQS: a
// body of records, or the test event S3 sends when notifications are
// configured, either of them alone (S3 → SQS) or inside an SNS envelope
// (S3 → SNS → SQS). The types are aws-lambda-go's events; Parse adds the
// telling apart of the shapes and the checks a consumer relies on.
package s3event

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// TestEvent is the Event of the message S3 sends when a bucket's
// notification configuration is set; it carries no records.
const TestEvent = "s3:TestEvent"

// ErrMalformed is returned by Parse for a body that is not an S3 event
// notification: not JSON, an unknown shape, a record without a bucket or
// key, or a key that does not URL-decode.
var ErrMalformed = errors.New("s3event: not an S3 event notification")

// Notification is one message body: either Records, or S3's test event.
// Each record's S3.Object.URLDecodedKey is its real key ("red+flower.jpg"
// is "red flower.jpg"); S3.Object.Key is URL-encoded as AWS sends it.
type Notification struct {
	events.S3Event
	// Test is S3's test event, nil for a body of records.
	Test *events.S3TestEvent
}

// IsTest reports whether n is S3's test event.
func (n Notification) IsTest() bool { return n.Test != nil }

// IsObjectCreated reports whether r is one of the ObjectCreated:* events
// (Put, Post, Copy, CompleteMultipartUpload).
func IsObjectCreated(r events.S3EventRecord) bool {
	return strings.HasPrefix(r.EventName, "ObjectCreated:")
}

// record is how a record is decoded: events.S3EventRecord with eventTime
// read as text, so a time that is not RFC 3339 leaves EventTime zero (the
// completer then uses its own clock) instead of making the whole message
// unreadable. Every time of the three shapes is read so.
type record struct {
	events.S3EventRecord
	EventTime string `json:"eventTime"`
}

// testEvent is how a test event is decoded: Time as text, as for record.
type testEvent struct {
	events.S3TestEvent
	Time string `json:"Time"`
}

// envelope is how an SNS envelope is decoded: Timestamp as text, as for
// record.
type envelope struct {
	events.SNSEntity
	Timestamp string `json:"Timestamp"`
}

// probe tells the three shapes apart: an SNS envelope has a Type, a test
// event an Event, and S3's own notification Records.
type probe struct {
	Event   string            `json:"Event"`
	Type    string            `json:"Type"`
	Records []json.RawMessage `json:"Records"`
}

// Parse reads an SQS message body holding an S3 event notification, direct
// or in an SNS envelope. Every error wraps ErrMalformed.
func Parse(body []byte) (Notification, error) {
	return parse(body, true)
}

func parse(body []byte, unwrap bool) (Notification, error) {
	var p probe
	if err := json.Unmarshal(body, &p); err != nil {
		return Notification{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case p.Type != "":
		if !unwrap {
			return Notification{}, fmt.Errorf("%w: SNS envelope inside an SNS envelope", ErrMalformed)
		}
		var env envelope
		if err := json.Unmarshal(body, &env); err != nil {
			return Notification{}, fmt.Errorf("%w: SNS envelope: %w", ErrMalformed, err)
		}
		if env.Type != "Notification" || env.Message == "" {
			return Notification{}, fmt.Errorf("%w: SNS message of type %q", ErrMalformed, env.Type)
		}
		return parse([]byte(env.Message), false)
	case p.Event != "":
		var t testEvent
		if err := json.Unmarshal(body, &t); err != nil {
			return Notification{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if t.Event != TestEvent || len(p.Records) > 0 {
			return Notification{}, fmt.Errorf("%w: event %q", ErrMalformed, p.Event)
		}
		t.S3TestEvent.Time = parseTime(t.Time)
		return Notification{Test: &t.S3TestEvent}, nil
	}
	var rs struct {
		Records []record `json:"Records"`
	}
	if err := json.Unmarshal(body, &rs); err != nil {
		return Notification{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(rs.Records) == 0 {
		return Notification{}, fmt.Errorf("%w: no Records", ErrMalformed)
	}
	var n Notification
	n.Records = make([]events.S3EventRecord, len(rs.Records))
	for i, r := range rs.Records {
		if err := validate(r.S3EventRecord); err != nil {
			return Notification{}, fmt.Errorf("record %d: %w", i, err)
		}
		n.Records[i] = r.S3EventRecord
		n.Records[i].EventTime = parseTime(r.EventTime)
	}
	return n, nil
}

// validate checks what a consumer relies on. A key that does not decode
// has already failed the unmarshalling (events.S3Object).
func validate(r events.S3EventRecord) error {
	switch {
	case r.EventName == "":
		return fmt.Errorf("%w: no eventName", ErrMalformed)
	case r.S3.Bucket.Name == "":
		return fmt.Errorf("%w: no bucket name", ErrMalformed)
	case r.S3.Object.Key == "":
		return fmt.Errorf("%w: no object key", ErrMalformed)
	}
	return nil
}

// parseTime reads an RFC 3339 time, zero if s is none.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}
