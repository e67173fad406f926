package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/mintgate/mintgate/shared/s3event"
)

func fixture(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestEncodeKeyLikeAWS(t *testing.T) {
	cases := map[string]string{
		"red flower.jpg":                                     "red+flower.jpg",
		"incoming/acme/a+b.jpg":                              "incoming/acme/a%2Bb.jpg",
		"incoming/acme/my photo+1 ü.jpg":                     "incoming/acme/my+photo%2B1+%C3%BC.jpg",
		"2020-01-01T00:00:00.json":                           "2020-01-01T00%3A00%3A00.json",
		"incoming/acme/7c9e6679-7425-40de-944b-e07fc1f90ae7": "incoming/acme/7c9e6679-7425-40de-944b-e07fc1f90ae7",
	}
	for key, want := range cases {
		if got := encodeKey(key); got != want {
			t.Errorf("EncodeKey(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestFromVersityPut(t *testing.T) {
	n, err := fromVersity(fixture(t, "versitygw-put.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Records) != 1 {
		t.Fatalf("%d records", len(n.Records))
	}
	r := n.Records[0]
	want := awsRecord{
		EventVersion:      "2.1",
		EventSource:       "aws:s3",
		AWSRegion:         "us-east-1",
		EventTime:         "2026-11-29T17:34:58.000Z",
		EventName:         "ObjectCreated:Put",
		UserIdentity:      events.S3UserIdentity{PrincipalID: "k"},
		RequestParameters: events.S3RequestParameters{SourceIPAddress: "127.0.0.1"},
		S3: awsEntity{
			SchemaVersion:   "1.0",
			ConfigurationID: "webhook-global",
			Bucket: events.S3Bucket{
				Name:          "uploads",
				OwnerIdentity: events.S3UserIdentity{PrincipalID: "k"},
				Arn:           "arn:aws:s3:::uploads",
			},
			Object: awsObject{
				Key:       "incoming/acme/my+photo%2B1+%C3%BC.jpg",
				Size:      5,
				ETag:      "5d41402abc4b2a76b9719d911017c592",
				Sequencer: "1",
			},
		},
	}
	if r != want {
		t.Fatalf("got  %+v\nwant %+v", r, want)
	}
	// What the bridge sends is what Parse reads, with the original key.
	body, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{`"s3:`, `\"`, "versionId", "glacierEventData", `"Event"`} {
		if strings.Contains(string(body), absent) {
			t.Errorf("AWS form contains %s: %s", absent, body)
		}
	}
	back, err := s3event.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	if key := back.Records[0].S3.Object.URLDecodedKey; key != "incoming/acme/my photo+1 ü.jpg" {
		t.Fatalf("round trip key %q", key)
	}
}

func TestFromVersityTestEvent(t *testing.T) {
	n, err := fromVersity(fixture(t, "versitygw-test-event.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := notification{Service: "Amazon S3", Event: s3event.TestEvent, Time: "2026-11-29T17:34:57.000Z", Bucket: "Test-Bucket"}
	if !n.isTest() || n.Service != want.Service || n.Time != want.Time || n.Bucket != want.Bucket || len(n.Records) != 0 {
		t.Fatalf("got %+v", n)
	}
	body, _ := json.Marshal(n)
	if back, err := s3event.Parse(body); err != nil || !back.IsTest() {
		t.Fatalf("Parse(%s) = %+v, %v", body, back, err)
	}
}

func TestFromVersityDeleteObjects(t *testing.T) {
	body := `{"Records":[{"eventName":"s3:ObjectRemoved:DeleteObjects","s3":{"bucket":{"name":"b"},"object":{"key":"a b","versionId":"v1"}}}]}`
	n, err := fromVersity([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	o := n.Records[0].S3.Object
	if n.Records[0].EventName != "ObjectRemoved:Delete" || o.Key != "a+b" || o.VersionID != "v1" {
		t.Fatalf("got %+v", n.Records[0])
	}
}

func TestFromVersityRejects(t *testing.T) {
	for _, body := range []string{``, `[]`, `{}`, `{"Records":[]}`, `{"Event":"s3:Other"}`,
		`{"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"b"}}}]}`} {
		if _, err := fromVersity([]byte(body)); !errors.Is(err, errNotVersity) {
			t.Errorf("FromVersity(%s) = %v", body, err)
		}
	}
}

// FuzzFromVersity: whatever the bridge builds from a versitygw event, the
// completer parses back to the same keys.
func FuzzFromVersity(f *testing.F) {
	f.Add(fixture(f, "versitygw-put.json"))
	f.Add(fixture(f, "versitygw-test-event.json"))
	f.Add([]byte(`{"Records":[{"eventName":"s3:ObjectCreated:Copy","s3":{"bucket":{"name":"b"},"object":{"key":"%2B /?#&="}}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := fromVersity(body)
		if err != nil {
			return
		}
		out, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		back, err := s3event.Parse(out)
		if err != nil {
			t.Fatalf("Parse(%s): %v", out, err)
		}
		if len(back.Records) != len(n.Records) {
			t.Fatalf("%d records became %d", len(n.Records), len(back.Records))
		}
		var in struct {
			Records []struct {
				S3 struct {
					Object struct {
						Key string `json:"key"`
					} `json:"object"`
				} `json:"s3"`
			} `json:"Records"`
		}
		_ = json.Unmarshal(body, &in)
		for i, r := range back.Records {
			if got := r.S3.Object.URLDecodedKey; got != in.Records[i].S3.Object.Key {
				t.Fatalf("key %q came back as %q", in.Records[i].S3.Object.Key, got)
			}
		}
	})
}
