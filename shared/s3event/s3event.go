// Package s3event is the S3 event notification format exactly as AWS sends
// it to SQS: a body of records, the test event S3 sends when notifications
// are configured, either of them alone (S3 → SQS) or inside an SNS envelope
// (S3 → SNS → SQS). The completer reads it with Parse; the local stack's
// bridge builds it from versitygw's webhook events with FromVersity.
package s3event

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// TestEvent is the Event of the message S3 sends when a bucket's
// notification configuration is set; it carries no records.
const TestEvent = "s3:TestEvent"

// ErrMalformed is returned by Parse for a body that is not an S3 event
// notification: not JSON, an unknown shape, a record without a bucket or
// key, or a key that does not URL-decode.
var ErrMalformed = errors.New("s3event: not an S3 event notification")

// Notification is one message body: either Records, or a test event
// (Event == TestEvent) with the Service, Time, Bucket, RequestId and HostId
// fields AWS documents.
type Notification struct {
	Records []Record `json:"Records,omitempty"`

	Service   string `json:"Service,omitempty"`
	Event     string `json:"Event,omitempty"`
	Time      string `json:"Time,omitempty"`
	Bucket    string `json:"Bucket,omitempty"`
	RequestID string `json:"RequestId,omitempty"`
	HostID    string `json:"HostId,omitempty"`
}

// IsTest reports whether n is S3's test event.
func (n Notification) IsTest() bool { return n.Event == TestEvent }

// Record is one event, with the field names of AWS's event message
// structure (eventVersion 2.1).
type Record struct {
	EventVersion      string            `json:"eventVersion"`
	EventSource       string            `json:"eventSource"`
	AWSRegion         string            `json:"awsRegion"`
	EventTime         string            `json:"eventTime"`
	EventName         string            `json:"eventName"`
	UserIdentity      Identity          `json:"userIdentity"`
	RequestParameters RequestParameters `json:"requestParameters"`
	ResponseElements  ResponseElements  `json:"responseElements"`
	S3                S3                `json:"s3"`
}

// Identity names a principal.
type Identity struct {
	PrincipalID string `json:"principalId"`
}

// RequestParameters are the request's source.
type RequestParameters struct {
	SourceIPAddress string `json:"sourceIPAddress"`
}

// ResponseElements identify the request to AWS support.
type ResponseElements struct {
	RequestID string `json:"x-amz-request-id"`
	HostID    string `json:"x-amz-id-2"`
}

// S3 names the bucket and the object of a record.
type S3 struct {
	SchemaVersion   string `json:"s3SchemaVersion"`
	ConfigurationID string `json:"configurationId"`
	Bucket          Bucket `json:"bucket"`
	Object          Object `json:"object"`
}

// Bucket is the record's bucket.
type Bucket struct {
	Name          string   `json:"name"`
	OwnerIdentity Identity `json:"ownerIdentity"`
	ARN           string   `json:"arn"`
}

// Object is the record's object. Key is URL-encoded as AWS sends it (a
// space is "+"); use Record.ObjectKey for the real key.
type Object struct {
	Key       string `json:"key"`
	Size      int64  `json:"size"`
	ETag      string `json:"eTag,omitempty"`
	VersionID string `json:"versionId,omitempty"`
	Sequencer string `json:"sequencer,omitempty"`
}

// ObjectKey is the object's key, URL-decoded ("red+flower.jpg" is
// "red flower.jpg"). Parse has already rejected keys that do not decode.
func (r Record) ObjectKey() (string, error) {
	k, err := url.QueryUnescape(r.S3.Object.Key)
	if err != nil {
		return "", fmt.Errorf("%w: object key %q: %w", ErrMalformed, r.S3.Object.Key, err)
	}
	return k, nil
}

// IsObjectCreated reports whether the record is one of the ObjectCreated:*
// events (Put, Post, Copy, CompleteMultipartUpload).
func (r Record) IsObjectCreated() bool { return strings.HasPrefix(r.EventName, "ObjectCreated:") }

// EncodeKey URL-encodes an object key the way S3 event notifications carry
// it: form encoding, so a space is "+" and "+" is "%2B", with "/" kept.
func EncodeKey(key string) string {
	return strings.ReplaceAll(url.QueryEscape(key), "%2F", "/")
}

// envelope is the part of an SNS notification that matters here.
type envelope struct {
	Type    string  `json:"Type"`
	Message *string `json:"Message"`
}

// probe tells the three shapes apart: an SNS envelope has a Type, a test
// event an Event, and S3's own notification Records.
type probe struct {
	Event string `json:"Event"`
	Type  string `json:"Type"`
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
		if env.Type != "Notification" || env.Message == nil {
			return Notification{}, fmt.Errorf("%w: SNS message of type %q", ErrMalformed, env.Type)
		}
		return parse([]byte(*env.Message), false)
	case p.Event != "":
		var n Notification
		if err := json.Unmarshal(body, &n); err != nil {
			return Notification{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if !n.IsTest() || len(n.Records) > 0 {
			return Notification{}, fmt.Errorf("%w: event %q", ErrMalformed, p.Event)
		}
		return n, nil
	}
	var n Notification
	if err := json.Unmarshal(body, &n); err != nil {
		return Notification{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(n.Records) == 0 {
		return Notification{}, fmt.Errorf("%w: no Records", ErrMalformed)
	}
	for i, r := range n.Records {
		if err := r.validate(); err != nil {
			return Notification{}, fmt.Errorf("record %d: %w", i, err)
		}
	}
	return n, nil
}

func (r Record) validate() error {
	switch {
	case r.EventName == "":
		return fmt.Errorf("%w: no eventName", ErrMalformed)
	case r.S3.Bucket.Name == "":
		return fmt.Errorf("%w: no bucket name", ErrMalformed)
	case r.S3.Object.Key == "":
		return fmt.Errorf("%w: no object key", ErrMalformed)
	}
	_, err := r.ObjectKey()
	return err
}
