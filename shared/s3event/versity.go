package s3event

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotVersity is returned by FromVersity for a body that is not one of
// versitygw's webhook events.
var ErrNotVersity = errors.New("s3event: not a versitygw event")

// awsTime is how AWS writes eventTime: UTC with milliseconds.
const awsTime = "2006-01-02T15:04:05.000Z"

// versityEvent is the body versitygw v1.8 posts to its --event-webhook-url
// (s3event.EventSchema in its source), or its start-up test event.
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
	RequestParameters RequestParameters `json:"requestParameters"`
	ResponseElements  ResponseElements  `json:"responseElements"`
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

// FromVersity turns a versitygw webhook body into the notification AWS
// would have sent for the same event. versitygw differs from AWS in ways a
// consumer notices: its eventName has an "s3:" prefix, its keys are not
// URL-encoded, its eTag keeps the quotes, its eventVersion is 2.2, its
// bucket ARN includes the key, its times have no milliseconds, and it
// invents ObjectRemoved:DeleteObjects. The result has none of that.
func FromVersity(body []byte) (Notification, error) {
	var v versityEvent
	if err := json.Unmarshal(body, &v); err != nil {
		return Notification{}, fmt.Errorf("%w: %w", ErrNotVersity, err)
	}
	if v.Event != "" {
		if v.Event != TestEvent || len(v.Records) > 0 {
			return Notification{}, fmt.Errorf("%w: event %q", ErrNotVersity, v.Event)
		}
		return Notification{Service: "Amazon S3", Event: TestEvent, Time: awsTimeOf(v.Time), Bucket: v.Bucket}, nil
	}
	if len(v.Records) == 0 {
		return Notification{}, fmt.Errorf("%w: no Records", ErrNotVersity)
	}
	n := Notification{Records: make([]Record, 0, len(v.Records))}
	for i, vr := range v.Records {
		if vr.EventName == "" || vr.S3.Bucket.Name == "" || vr.S3.Object.Key == "" {
			return Notification{}, fmt.Errorf("%w: record %d lacks eventName, bucket or key", ErrNotVersity, i)
		}
		n.Records = append(n.Records, awsRecord(vr))
	}
	return n, nil
}

func awsRecord(vr versityRecord) Record {
	name := strings.TrimPrefix(vr.EventName, "s3:")
	if name == "ObjectRemoved:DeleteObjects" {
		// AWS reports each key of a multi-object delete as its own Delete.
		name = "ObjectRemoved:Delete"
	}
	r := Record{
		EventVersion:      "2.1",
		EventSource:       "aws:s3",
		AWSRegion:         vr.AWSRegion,
		EventTime:         awsTimeOf(vr.EventTime),
		EventName:         name,
		UserIdentity:      Identity{PrincipalID: vr.UserIdentity.PrincipalID},
		RequestParameters: vr.RequestParameters,
		ResponseElements:  vr.ResponseElements,
		S3: S3{
			SchemaVersion:   "1.0",
			ConfigurationID: vr.S3.ConfigurationID,
			Bucket: Bucket{
				Name:          vr.S3.Bucket.Name,
				OwnerIdentity: Identity{PrincipalID: vr.S3.Bucket.OwnerIdentity.PrincipalID},
				ARN:           "arn:aws:s3:::" + vr.S3.Bucket.Name,
			},
			Object: Object{
				Key:       EncodeKey(vr.S3.Object.Key),
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

// awsTimeOf rewrites an RFC 3339 time the way AWS writes it; anything else
// is kept as it is.
func awsTimeOf(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format(awsTime)
}
