package s3event_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
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
				if len(n.Records) != 0 || n.Test.Bucket != "amzn-s3-demo-bucket" {
					t.Fatalf("test event %+v", n)
				}
				return
			}
			if len(n.Records) != 1 {
				t.Fatalf("%d records", len(n.Records))
			}
			r := n.Records[0]
			key := r.S3.Object.URLDecodedKey
			if r.EventName != c.event || key != c.key || r.S3.Object.Size != c.size || s3event.IsObjectCreated(r) != c.created {
				t.Fatalf("got %s %q size %d created %v", r.EventName, key, r.S3.Object.Size, s3event.IsObjectCreated(r))
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
			if _, err := url.QueryUnescape(r.S3.Object.Key); err != nil || r.S3.Object.URLDecodedKey == "" || r.EventName == "" || r.S3.Bucket.Name == "" {
				t.Fatalf("accepted an unusable record %+v: %v", r, err)
			}
		}
	})
}
