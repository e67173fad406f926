package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/mintgate/mintgate/shared/s3event"
)

// errNotVersity is returned by fromVersity for a body that is not one of
// versitygw's webhook events.
var errNotVersity = errors.New("s3bridge: not a versitygw event")

// awsTime is how AWS writes eventTime: UTC with milliseconds.
const awsTime = "2006-01-02T15:04:05.000Z"

// versityEvent is the body versitygw v1.8 posts to its --event-webhook-url
// (s3event.EventSchema in its source), or its start-up test event. It is
// versitygw's dialect, not AWS's: events' types do not read it (its
// glacierEventData carries empty times).
type versityEvent struct {
	Records []versityRecord `json:"Records"`

	Service string `json:"Service"`
	Event   string `json:"Event"`
	Time    string `json:"Time"`
	Bucket  string `json:"Bucket"`
}

type versityRecord struct {
	EventVersion string `json:"eventVersion"`
	EventSource  string `json:"eventSource"`
	AWSRegion    string `json:"awsRegion"`
	EventTime    string `json:"eventTime"`
	EventName    string `json:"eventName"`
	UserIdentity struct {
		PrincipalID string `json:"PrincipalId"`
	} `json:"userIdentity"`
	RequestParameters events.S3RequestParameters `json:"requestParameters"`
	ResponseElements  responseElements           `json:"responseElements"`
	S3                struct {
		SchemaVersion   string `json:"s3SchemaVersion"`
		ConfigurationID string `json:"configurationId"`
		Bucket          struct {
			Name          string `json:"name"`
			OwnerIdentity struct {
				PrincipalID string `json:"PrincipalId"`
			} `json:"ownerIdentity"`
		} `json:"bucket"`
		Object struct {
			Key       string  `json:"key"`
			Size      int64   `json:"size"`
			ETag      *string `json:"eTag"`
			VersionID *string `json:"versionId"`
			Sequencer string  `json:"sequencer"`
		} `json:"object"`
	} `json:"s3"`
}

// What the bridge sends is AWS's S3 event notification exactly as AWS
// writes it. events' types read that form (s3event.Parse) but do not write
// it: they add urlDecodedKey, write an empty versionId, eTag and sequencer,
// leave out a size of 0 and drop eventTime's milliseconds. So the bridge
// writes these, made of events' parts wherever those write the same JSON.

// notification is one message body: Records, or the test event.
type notification struct {
	Records []awsRecord `json:"Records,omitempty"`

	Service string `json:"Service,omitempty"`
	Event   string `json:"Event,omitempty"`
	Time    string `json:"Time,omitempty"`
	Bucket  string `json:"Bucket,omitempty"`
}

// isTest reports whether n is S3's test event.
func (n notification) isTest() bool { return n.Event == s3event.TestEvent }

// awsRecord is one record, with the field names of AWS's event message
// structure (eventVersion 2.1).
type awsRecord struct {
	EventVersion      string                     `json:"eventVersion"`
	EventSource       string                     `json:"eventSource"`
	AWSRegion         string                     `json:"awsRegion"`
	EventTime         string                     `json:"eventTime"`
	EventName         string                     `json:"eventName"`
	UserIdentity      events.S3UserIdentity      `json:"userIdentity"`
	RequestParameters events.S3RequestParameters `json:"requestParameters"`
	ResponseElements  responseElements           `json:"responseElements"`
	S3                awsEntity                  `json:"s3"`
}

// responseElements identify the request to AWS support; AWS always writes
// both.
type responseElements struct {
	RequestID string `json:"x-amz-request-id"`
	HostID    string `json:"x-amz-id-2"`
}

// awsEntity names the bucket and the object of a record.
type awsEntity struct {
	SchemaVersion   string          `json:"s3SchemaVersion"`
	ConfigurationID string          `json:"configurationId"`
	Bucket          events.S3Bucket `json:"bucket"`
	Object          awsObject       `json:"object"`
}

// awsObject is the record's object; Key is URL-encoded (encodeKey).
type awsObject struct {
	Key       string `json:"key"`
	Size      int64  `json:"size"`
	ETag      string `json:"eTag,omitempty"`
	VersionID string `json:"versionId,omitempty"`
	Sequencer string `json:"sequencer,omitempty"`
}

// fromVersity turns a versitygw webhook body into the notification AWS
// would have sent for the same event. versitygw differs from AWS in ways a
// consumer notices: its eventName has an "s3:" prefix, its keys are not
// URL-encoded, its eTag keeps the quotes, its eventVersion is 2.2, its
// bucket ARN includes the key, its times have no milliseconds, and it
// invents ObjectRemoved:DeleteObjects. The result has none of that.
func fromVersity(body []byte) (notification, error) {
	var v versityEvent
	if err := json.Unmarshal(body, &v); err != nil {
		return notification{}, fmt.Errorf("%w: %w", errNotVersity, err)
	}
	if v.Event != "" {
		if v.Event != s3event.TestEvent || len(v.Records) > 0 {
			return notification{}, fmt.Errorf("%w: event %q", errNotVersity, v.Event)
		}
		return notification{Service: "Amazon S3", Event: s3event.TestEvent, Time: awsTimeOf(v.Time), Bucket: v.Bucket}, nil
	}
	if len(v.Records) == 0 {
		return notification{}, fmt.Errorf("%w: no Records", errNotVersity)
	}
	n := notification{Records: make([]awsRecord, 0, len(v.Records))}
	for i, vr := range v.Records {
		if vr.EventName == "" || vr.S3.Bucket.Name == "" || vr.S3.Object.Key == "" {
			return notification{}, fmt.Errorf("%w: record %d lacks eventName, bucket or key", errNotVersity, i)
		}
		n.Records = append(n.Records, toAWS(vr))
	}
	return n, nil
}

func toAWS(vr versityRecord) awsRecord {
	name := strings.TrimPrefix(vr.EventName, "s3:")
	if name == "ObjectRemoved:DeleteObjects" {
		// AWS reports each key of a multi-object delete as its own Delete.
		name = "ObjectRemoved:Delete"
	}
	r := awsRecord{
		EventVersion:      "2.1",
		EventSource:       "aws:s3",
		AWSRegion:         vr.AWSRegion,
		EventTime:         awsTimeOf(vr.EventTime),
		EventName:         name,
		UserIdentity:      events.S3UserIdentity{PrincipalID: vr.UserIdentity.PrincipalID},
		RequestParameters: vr.RequestParameters,
		ResponseElements:  vr.ResponseElements,
		S3: awsEntity{
			SchemaVersion:   "1.0",
			ConfigurationID: vr.S3.ConfigurationID,
			Bucket: events.S3Bucket{
				Name:          vr.S3.Bucket.Name,
				OwnerIdentity: events.S3UserIdentity{PrincipalID: vr.S3.Bucket.OwnerIdentity.PrincipalID},
				Arn:           "arn:aws:s3:::" + vr.S3.Bucket.Name,
			},
			Object: awsObject{
				Key:       encodeKey(vr.S3.Object.Key),
				Size:      vr.S3.Object.Size,
				Sequencer: vr.S3.Object.Sequencer,
			},
		},
	}
	if e := vr.S3.Object.ETag; e != nil {
		r.S3.Object.ETag = strings.Trim(*e, `"`)
	}
	if id := vr.S3.Object.VersionID; id != nil && *id != "null" {
		r.S3.Object.VersionID = *id
	}
	return r
}

// encodeKey URL-encodes an object key the way S3 event notifications carry
// it: form encoding, so a space is "+" and "+" is "%2B", with "/" kept.
// events.S3Object's URLDecodedKey (url.QueryUnescape) reverses it.
func encodeKey(key string) string {
	return strings.ReplaceAll(url.QueryEscape(key), "%2F", "/")
}

// awsTimeOf rewrites an RFC 3339 time the way AWS writes it; anything else
// is kept as it is.
func awsTimeOf(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format(awsTime)
}
