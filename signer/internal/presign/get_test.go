package presign

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mintgate/mintgate/shared/dial"
)

// Our presigned GET carries exactly the query, signature included, of
// s3.PresignClient's PresignGetObject with the same response-* overrides
// at the same time: S3 accepts it as it accepts the SDK's, and refuses it
// once any override is changed (the integration tests show both on a real
// server).
func TestPresignedGetIsTheSDKs(t *testing.T) {
	for _, tc := range []struct {
		name, endpoint, token, key string
		pathStyle                  bool
	}{
		{name: "AWS, virtual-hosted", key: "incoming/acme/0f8fad5b-d9cb-469f-a165-70867728950e"},
		{name: "local, path style, session token", endpoint: "http://127.0.0.1:7070", pathStyle: true, token: "IQo+session/token==", key: "incoming/acme/0f8fad5b-d9cb-469f-a165-70867728950e"},
		{name: "a key that needs escaping", key: "incoming/acme/a b+c=d~é"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			creds := &rotatingCreds{c: aws.Credentials{AccessKeyID: "AKIDMINTGATETEST", SecretAccessKey: "secret", SessionToken: tc.token}}
			client := s3.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: creds}, dial.S3Addressing(tc.endpoint, tc.pathStyle))
			ours, err := presignerFor(ctx, client.Options(), "uploads")
			if err != nil {
				t.Fatal(err)
			}
			r := Read{ContentType: "application/pdf", ContentDisposition: `attachment; filename="rapport ete.pdf"; filename*=UTF-8''rapport%20%C3%A9t%C3%A9.pdf`, CacheControl: "private"}
			want, err := s3.NewPresignClient(client).PresignGetObject(ctx, &s3.GetObjectInput{
				Bucket: aws.String("uploads"), Key: aws.String(tc.key),
				ResponseContentType: aws.String(r.ContentType), ResponseContentDisposition: aws.String(r.ContentDisposition), ResponseCacheControl: aws.String(r.CacheControl),
			}, s3.WithPresignExpires(300*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			wu := mustParse(t, want.URL)
			at, err := time.Parse(sigv4Date, wu.Query().Get("X-Amz-Date"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ours.Get(ctx, tc.key, r, 300*time.Second, at.Add(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			gu := mustParse(t, got)
			if gu.Scheme+"://"+gu.Host+gu.EscapedPath() != wu.Scheme+"://"+wu.Host+wu.EscapedPath() {
				t.Errorf("path: ours %s, sdk %s", got, want.URL)
			}
			if g, w := gu.Query(), wu.Query(); !sameValues(g, w) {
				t.Errorf("query differs\n ours: %s\n sdk:  %s", got, want.URL)
			}
		})
	}
}

func sameValues(a, b url.Values) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}
