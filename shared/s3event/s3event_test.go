package s3event_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

func TestParseAWSFixtures(t *testing.T) {
	const id = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	cases := []struct {
		file    string
		test    bool
		event   string
		key     string // decoded
		size    int64
		created bool
	}{
		{file: "aws-example.json", event: "ObjectCreated:Put", key: "HappyFace.jpg", size: 1024, created: true},
		{file: "direct-put.json", event: "ObjectCreated:Put", key: "incoming/acme/" + id, size: 1024, created: true},
		{file: "direct-multipart.json", event: "ObjectCreated:CompleteMultipartUpload", key: "incoming/acme/" + id, size: 20971520, created: true},
		{file: "direct-encoded-key.json", event: "ObjectCreated:Put", key: "incoming/acme/" + id, size: 1024, created: true},
		{file: "direct-space-plus-key.json", event: "ObjectCreated:Put", key: "incoming/acme/my photo+1.jpg", size: 1024, created: true},
		{file: "direct-removed.json", event: "ObjectRemoved:Delete", key: "incoming/acme/" + id},
		{file: "sns-put.json", event: "ObjectCreated:Put", key: "incoming/acme/" + id, size: 1024, created: true},
		{file: "test-event.json", test: true},
		{file: "sns-test-event.json", test: true},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			n, err := s3event.Parse(fixture(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if n.IsTest() != c.test {
				t.Fatalf("IsTest = %v", n.IsTest())
			}
			if c.test {
				if len(n.Records) != 0 || n.Bucket != "amzn-s3-demo-bucket" {
					t.Fatalf("test event %+v", n)
				}
				return
			}
			if len(n.Records) != 1 {
				t.Fatalf("%d records", len(n.Records))
			}
			r := n.Records[0]
			key, err := r.ObjectKey()
			if err != nil {
				t.Fatal(err)
			}
			if r.EventName != c.event || key != c.key || r.S3.Object.Size != c.size || r.IsObjectCreated() != c.created {
				t.Fatalf("got %s %q size %d created %v", r.EventName, key, r.S3.Object.Size, r.IsObjectCreated())
			}
			if r.S3.Bucket.Name != "amzn-s3-demo-bucket" || r.EventVersion != "2.1" || r.AWSRegion != "us-west-2" {
				t.Fatalf("record %+v", r)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	bad := map[string]string{
		"not json":          `Records`,
		"array":             `[{"Records":[]}]`,
		"empty object":      `{}`,
		"null records":      `{"Records":null}`,
		"empty records":     `{"Records":[]}`,
		"records not array": `{"Records":{"eventName":"ObjectCreated:Put"}}`,
		"no key":            `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"size":1}}}]}`,
		"no bucket":         `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"object":{"key":"k"}}}]}`,
		"no event name":     `{"Records":[{"s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`,
		"bad escape":        `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/%zz"}}}]}`,
		"size as string":    `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":"1"}}}]}`,
		"other event":       `{"Event":"s3:Something","Service":"Amazon S3"}`,
		"sns subscription":  `{"Type":"SubscriptionConfirmation","Message":"You have chosen to subscribe","SubscribeURL":"https://example.com"}`,
		"sns no message":    `{"Type":"Notification"}`,
		"sns bad inner":     `{"Type":"Notification","Message":"{\"Records\":"}`,
		"sns in sns":        `{"Type":"Notification","Message":"{\"Type\":\"Notification\",\"Message\":\"{}\"}"}`,
		"sns type number":   `{"Type":1,"Message":"{}"}`,
	}
	for name, body := range bad {
		if n, err := s3event.Parse([]byte(body)); !errors.Is(err, s3event.ErrMalformed) {
			t.Errorf("%s: Parse = %+v, %v; want ErrMalformed", name, n, err)
		}
	}
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
		if got := s3event.EncodeKey(key); got != want {
			t.Errorf("EncodeKey(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestFromVersityPut(t *testing.T) {
	n, err := s3event.FromVersity(fixture(t, "versitygw-put.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Records) != 1 {
		t.Fatalf("%d records", len(n.Records))
	}
	r := n.Records[0]
	want := s3event.Record{
		EventVersion:      "2.1",
		EventSource:       "aws:s3",
		AWSRegion:         "us-east-1",
		EventTime:         "2026-11-29T17:34:58.000Z",
		EventName:         "ObjectCreated:Put",
		UserIdentity:      s3event.Identity{PrincipalID: "k"},
		RequestParameters: s3event.RequestParameters{SourceIPAddress: "127.0.0.1"},
		S3: s3event.S3{
			SchemaVersion:   "1.0",
			ConfigurationID: "webhook-global",
			Bucket: s3event.Bucket{
				Name:          "uploads",
				OwnerIdentity: s3event.Identity{PrincipalID: "k"},
				ARN:           "arn:aws:s3:::uploads",
			},
			Object: s3event.Object{
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
	if key, _ := back.Records[0].ObjectKey(); key != "incoming/acme/my photo+1 ü.jpg" {
		t.Fatalf("round trip key %q", key)
	}
}

func TestFromVersityTestEvent(t *testing.T) {
	n, err := s3event.FromVersity(fixture(t, "versitygw-test-event.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := s3event.Notification{Service: "Amazon S3", Event: s3event.TestEvent, Time: "2026-11-29T17:34:57.000Z", Bucket: "Test-Bucket"}
	if !n.IsTest() || n.Service != want.Service || n.Time != want.Time || n.Bucket != want.Bucket || len(n.Records) != 0 {
		t.Fatalf("got %+v", n)
	}
	body, _ := json.Marshal(n)
	if back, err := s3event.Parse(body); err != nil || !back.IsTest() {
		t.Fatalf("Parse(%s) = %+v, %v", body, back, err)
	}
}

func TestFromVersityDeleteObjects(t *testing.T) {
	body := `{"Records":[{"eventName":"s3:ObjectRemoved:DeleteObjects","s3":{"bucket":{"name":"b"},"object":{"key":"a b","versionId":"v1"}}}]}`
	n, err := s3event.FromVersity([]byte(body))
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
		if _, err := s3event.FromVersity([]byte(body)); !errors.Is(err, s3event.ErrNotVersity) {
			t.Errorf("FromVersity(%s) = %v", body, err)
		}
	}
}

// FuzzParse: no input panics, and whatever Parse accepts is usable — every
// record has a bucket, an event name and a key that decodes.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, file := range files {
		f.Add(fixture(f, filepath.Base(file)))
	}
	f.Add([]byte(`{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"a%"}}}]}`))
	f.Add([]byte(`{"Type":"Notification","Message":"{\"Event\":\"s3:TestEvent\"}"}`))
	f.Add([]byte(`{"Records":null,"Event":"s3:TestEvent"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := s3event.Parse(body)
		if err != nil {
			if !errors.Is(err, s3event.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if n.IsTest() {
			if len(n.Records) != 0 {
				t.Fatalf("test event with records: %+v", n)
			}
			return
		}
		if len(n.Records) == 0 {
			t.Fatal("accepted a notification without records")
		}
		for _, r := range n.Records {
			if _, err := r.ObjectKey(); err != nil || r.EventName == "" || r.S3.Bucket.Name == "" {
				t.Fatalf("accepted an unusable record %+v: %v", r, err)
			}
		}
	})
}

// FuzzFromVersity: whatever the bridge builds from a versitygw event, the
// completer parses back to the same keys.
func FuzzFromVersity(f *testing.F) {
	f.Add(fixture(f, "versitygw-put.json"))
	f.Add(fixture(f, "versitygw-test-event.json"))
	f.Add([]byte(`{"Records":[{"eventName":"s3:ObjectCreated:Copy","s3":{"bucket":{"name":"b"},"object":{"key":"%2B /?#&="}}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := s3event.FromVersity(body)
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
			if got, _ := r.ObjectKey(); got != in.Records[i].S3.Object.Key {
				t.Fatalf("key %q came back as %q", in.Records[i].S3.Object.Key, got)
			}
		}
	})
}
