package presign

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
)

// rotatingCreds hands out whatever credentials the test last set, as a
// role's provider does when the cache refreshes.
type rotatingCreds struct{ c aws.Credentials }

func (r *rotatingCreds) Retrieve(context.Context) (aws.Credentials, error) { return r.c, nil }

// Our presigner's URL is byte for byte the one s3.PresignClient makes for
// the same client options and inputs at the same time, for every way an S3
// bucket is addressed — so S3 (and versitygw, MinIO …) accept it exactly as
// they accepted the SDK's. The SDK's presigner runs untouched, on its own
// clock; ours signs at the X-Amz-Date the SDK's URL states. The URLs keep
// matching when the credentials rotate, and the cached signing key follows
// the UTC day.
func TestPresignedURLIsTheSDKsByteForByte(t *testing.T) {
	const (
		akid   = "AKIDMINTGATETEST"
		secret = "mintgate-test-secret-key"
		token  = "IQoJb3JpZ2luX2VjEPT//////////wEaCXVzLWVhc3QtMSJH+MEUCIQ/session+token=="
	)
	cases := []struct {
		name      string
		region    string
		bucket    string
		endpoint  string // MINTGATE_S3_ENDPOINT
		pathStyle bool   // MINTGATE_S3_PATH_STYLE
		token     string
		key       string
		opt       func(*s3.Options)
		want      string // the URL's scheme://host/path, to show which rule applied
	}{
		{name: "AWS, virtual-hosted", region: "us-east-1", bucket: "uploads",
			want: "https://uploads.s3.us-east-1.amazonaws.com/incoming/acme/"},
		{name: "AWS, path style", region: "eu-west-1", bucket: "uploads", pathStyle: true,
			want: "https://s3.eu-west-1.amazonaws.com/uploads/incoming/acme/"},
		{name: "AWS, virtual-hosted, temporary credentials (IRSA)", region: "eu-central-1", bucket: "uploads", token: token,
			want: "https://uploads.s3.eu-central-1.amazonaws.com/incoming/acme/"},
		{name: "AWS, a dotted bucket falls back to path style", region: "us-west-2", bucket: "uploads.example.com",
			want: "https://s3.us-west-2.amazonaws.com/uploads.example.com/incoming/acme/"},
		{name: "AWS, FIPS and dual-stack", region: "us-east-1", bucket: "uploads",
			opt: func(o *s3.Options) {
				o.EndpointOptions.UseFIPSEndpoint = aws.FIPSEndpointStateEnabled
				o.EndpointOptions.UseDualStackEndpoint = aws.DualStackEndpointStateEnabled
			},
			want: "https://uploads.s3-fips.dualstack.us-east-1.amazonaws.com/incoming/acme/"},
		{name: "AWS, a fips pseudo-region", region: "fips-us-east-1", bucket: "uploads",
			want: "https://uploads.s3-fips.us-east-1.amazonaws.com/incoming/acme/"},
		{name: "custom endpoint, path style (the local stack)", region: "us-east-1", bucket: "uploads",
			endpoint: "http://127.0.0.1:9", pathStyle: true,
			want: "http://127.0.0.1:9/uploads/incoming/acme/"},
		{name: "custom endpoint, path style, session token", region: "us-east-1", bucket: "uploads", token: token,
			endpoint: "http://127.0.0.1:7070", pathStyle: true,
			want: "http://127.0.0.1:7070/uploads/incoming/acme/"},
		{name: "custom endpoint, virtual-hosted", region: "auto", bucket: "uploads",
			endpoint: "https://storage.example.test",
			want:     "https://uploads.storage.example.test/incoming/acme/"},
		{name: "custom endpoint with a path and the default port", region: "us-east-1", bucket: "uploads", token: token,
			endpoint: "http://minio.internal:80/s3", pathStyle: true,
			want: "http://minio.internal:80/s3/uploads/incoming/acme/"},
		{name: "custom IP endpoint, virtual-hosted asked, path style given", region: "us-east-1", bucket: "uploads",
			endpoint: "http://10.0.0.7:9000",
			want:     "http://10.0.0.7:9000/uploads/incoming/acme/"},
		{name: "a key that needs escaping", region: "us-east-1", bucket: "uploads", key: "incoming/acme/a b+c=d~é",
			want: "https://uploads.s3.us-east-1.amazonaws.com/incoming/acme/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			creds := &rotatingCreds{c: aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret, SessionToken: tc.token}}
			opts := []func(*s3.Options){dial.S3Addressing(tc.endpoint, tc.pathStyle)}
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			client := s3.NewFromConfig(aws.Config{Region: tc.region, Credentials: creds}, opts...)
			sdk := s3.NewPresignClient(client)
			ours, err := presignerFor(ctx, client.Options(), tc.bucket)
			if err != nil {
				t.Fatal(err)
			}
			key := tc.key
			if key == "" {
				key = "incoming/acme/" + uuid.NewString()
			}
			check := func(step string) {
				t.Helper()
				want, err := sdk.PresignPutObject(ctx, &s3.PutObjectInput{
					Bucket: aws.String(tc.bucket), Key: aws.String(key),
					ContentType: aws.String("image/png"), ContentLength: aws.Int64(5), IfNoneMatch: aws.String("*"),
				}, s3.WithPresignExpires(120*time.Second))
				if err != nil {
					t.Fatalf("%s: PresignClient: %v", step, err)
				}
				at, err := time.Parse("20060102T150405Z", mustParse(t, want.URL).Query().Get("X-Amz-Date"))
				if err != nil {
					t.Fatalf("%s: the SDK's X-Amz-Date: %v", step, err)
				}
				up, err := ours.Put(ctx, key, "image/png", 5, 120*time.Second, at.Add(999*time.Millisecond))
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if up.URL != want.URL {
					t.Fatalf("%s: URL differs from PresignClient's\n ours: %s\n sdk:  %s", step, up.URL, want.URL)
				}
				if want.Method != http.MethodPut || !strings.HasPrefix(up.URL, tc.want) {
					t.Errorf("%s: %s %s, want PUT %s…", step, want.Method, up.URL, tc.want)
				}
				// The headers the 201 tells the uploader to send are the
				// signed ones, host aside, with the SDK's values.
				signed := http.Header{
					"Content-Length": {up.Headers.ContentLength},
					"Content-Type":   {up.Headers.ContentType},
					"If-None-Match":  {up.Headers.IfNoneMatch},
					"Host":           {want.SignedHeader.Get("Host")},
				}
				if !maps.EqualFunc(signed, want.SignedHeader, slices.Equal) {
					t.Errorf("%s: signed headers %v, the SDK signed %v", step, signed, want.SignedHeader)
				}
				q := mustParse(t, up.URL).Query()
				if got := q.Get("X-Amz-SignedHeaders"); got != "content-length;content-type;host;if-none-match" {
					t.Errorf("%s: X-Amz-SignedHeaders %q", step, got)
				}
				if got := q.Get("X-Amz-Credential"); !strings.HasPrefix(got, creds.c.AccessKeyID+"/") {
					t.Errorf("%s: X-Amz-Credential %q, want the provider's current key %s", step, got, creds.c.AccessKeyID)
				}
				if got := q.Get("X-Amz-Security-Token"); got != tc.token {
					t.Errorf("%s: X-Amz-Security-Token %q, want %q", step, got, tc.token)
				}
			}
			check("first sign")
			checkSum(t, ctx, sdk, ours, tc.bucket, key)
			check("again, with the cached signing key")
			creds.c = aws.Credentials{AccessKeyID: "AKIDROTATED", SecretAccessKey: "rotated-secret", SessionToken: tc.token}
			check("after the credentials rotated")

			// The SDK's clock cannot be moved: across midnight, ours with a
			// warm key cache must sign as one with a cold cache does.
			for _, at := range []time.Time{
				time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC),
				time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
			} {
				warm, err := ours.Put(ctx, key, "image/png", 5, 120*time.Second, at)
				if err != nil {
					t.Fatal(err)
				}
				fresh, err := presignerFor(ctx, client.Options(), tc.bucket)
				if err != nil {
					t.Fatal(err)
				}
				fresh.keys.cur.Store(nil) // forget the key its check at start derived
				cold, err := fresh.Put(ctx, key, "image/png", 5, 120*time.Second, at)
				if err != nil {
					t.Fatal(err)
				}
				if warm.URL != cold.URL {
					t.Fatalf("at %v: a cached signing key signed differently\n warm: %s\n cold: %s", at, warm.URL, cold.URL)
				}
			}
		})
	}
}

// checkSum: a checksum-bound URL is PresignClient's for a PutObject with
// ChecksumSHA256, the checksum a signed header (not in the query, where S3
// ignores it), and the headers the uploader is told to send are the
// signed ones.
func checkSum(t *testing.T, ctx context.Context, sdk *s3.PresignClient, ours *Presigner, bucket, key string) {
	t.Helper()
	const sum = "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="
	want, err := sdk.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), ChecksumSHA256: aws.String(sum),
		ContentType: aws.String("image/png"), ContentLength: aws.Int64(5), IfNoneMatch: aws.String("*"),
	}, s3.WithPresignExpires(120*time.Second))
	if err != nil {
		t.Fatalf("PresignClient with a checksum: %v", err)
	}
	at, err := time.Parse("20060102T150405Z", mustParse(t, want.URL).Query().Get("X-Amz-Date"))
	if err != nil {
		t.Fatal(err)
	}
	up, err := ours.PutChecksum(ctx, key, "image/png", sum, 5, 120*time.Second, at)
	if err != nil {
		t.Fatal(err)
	}
	if up.URL != want.URL {
		t.Fatalf("checksum URL differs from PresignClient's\n ours: %s\n sdk:  %s", up.URL, want.URL)
	}
	q := mustParse(t, up.URL).Query()
	if got := q.Get("X-Amz-SignedHeaders"); got != "content-length;content-type;host;if-none-match;x-amz-checksum-sha256" {
		t.Errorf("X-Amz-SignedHeaders %q", got)
	}
	for k := range q {
		if strings.HasPrefix(strings.ToLower(k), "x-amz-checksum") {
			t.Errorf("the checksum is in the query (%s), where S3 ignores it", k)
		}
	}
	signed := http.Header{
		"Content-Length":        {up.Headers.ContentLength},
		"Content-Type":          {up.Headers.ContentType},
		"If-None-Match":         {up.Headers.IfNoneMatch},
		"X-Amz-Checksum-Sha256": {up.Headers.ChecksumSHA256},
		"Host":                  {want.SignedHeader.Get("Host")},
	}
	if !maps.EqualFunc(signed, want.SignedHeader, slices.Equal) {
		t.Errorf("signed headers %v, the SDK signed %v", signed, want.SignedHeader)
	}
}

// A checksum that is not the base64 of 32 bytes is never signed.
func TestPutChecksumRefusesWhatIsNoSHA256(t *testing.T) {
	client := s3.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: &rotatingCreds{c: aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "s"}}})
	p, err := presignerFor(context.Background(), client.Options(), "uploads")
	if err != nil {
		t.Fatal(err)
	}
	for _, sum := range []string{
		"LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ",   // 43
		"LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCR=",  // not canonical
		"LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=",  // URL alphabet
		"LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ==", // 45
		"LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOL\nCQ=",
	} {
		if _, err := p.PutChecksum(context.Background(), "incoming/acme/x", "image/png", sum, 5, time.Minute, time.Now()); err == nil {
			t.Errorf("%q signed", sum)
		}
	}
}

// A bucket that plain SigV4 cannot sign for stops the signer at start
// instead of yielding URLs that S3 refuses.
func TestPresignerRefusesBucketsItCannotSign(t *testing.T) {
	client := s3.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: &rotatingCreds{}})
	for _, bucket := range []string{
		"uploads--use1-az4--x-s3",                                 // an S3 Express directory bucket: session auth
		"arn:aws:s3::123456789012:accesspoint/mfzwi23gnjvgw.mrap", // a multi-region access point: SigV4a
	} {
		_, err := presignerFor(context.Background(), client.Options(), bucket)
		if err == nil || !strings.Contains(err.Error(), "plain SigV4 only") {
			t.Errorf("%s: %v, want a refusal to sign", bucket, err)
		}
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// BenchmarkPresign is one URL, ours beside s3.PresignClient's for the same
// bucket and credentials.
//
//	go test -run '^$' -bench BenchmarkPresign -benchmem ./signer/
func BenchmarkPresign(b *testing.B) {
	ctx := context.Background()
	creds := &rotatingCreds{c: aws.Credentials{AccessKeyID: "AKIDMINTGATETEST", SecretAccessKey: "mintgate-test-secret-key"}}
	client := s3.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: creds})
	key := "incoming/acme/" + uuid.NewString()
	b.Run("direct", func(b *testing.B) {
		p, err := presignerFor(ctx, client.Options(), "uploads")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for range b.N {
			if _, err := p.Put(ctx, key, "image/png", 5, 120*time.Second, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct, checksum", func(b *testing.B) {
		p, err := presignerFor(ctx, client.Options(), "uploads")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for range b.N {
			if _, err := p.PutChecksum(ctx, key, "image/png", probeChecksum, 5, 120*time.Second, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("PresignClient", func(b *testing.B) {
		sdk := s3.NewPresignClient(client)
		b.ReportAllocs()
		for range b.N {
			if _, err := sdk.PresignPutObject(ctx, &s3.PutObjectInput{
				Bucket: aws.String("uploads"), Key: aws.String(key),
				ContentType: aws.String("image/png"), ContentLength: aws.Int64(5), IfNoneMatch: aws.String("*"),
			}, s3.WithPresignExpires(120*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Whatever the key, content type, credentials, time and expiry, the URL
// is v4.Signer's for the request the SDK would build.
func FuzzPresignMatchesV4Signer(f *testing.F) {
	f.Add("incoming/acme/0f8fad5b-d9cb-469f-a165-70867728950e", "image/png", "AKIDMINTGATETEST", "secret", "", int64(5), int64(120), int64(1796083199))
	f.Add("incoming/a b/+=&?#%/é/\x00/~", "application/vnd.api+json", "AKID/+=", "s+/=", "IQoJb3JpZ2luX2Vj+/==", int64(1<<40), int64(604800), int64(0))
	f.Add("a//b/", "x/y\"<>&\\", "", "", "tok en", int64(1), int64(1), int64(253402300799))
	ctx := context.Background()
	creds := &rotatingCreds{}
	var presigners []*Presigner
	for _, opt := range []func(*s3.Options){
		dial.S3Addressing("", false),
		dial.S3Addressing("http://127.0.0.1:9/base", true),
	} {
		creds.c = aws.Credentials{AccessKeyID: "AKIDMINTGATETEST", SecretAccessKey: "secret"}
		client := s3.NewFromConfig(aws.Config{Region: "eu-west-1", Credentials: creds}, opt)
		p, err := presignerFor(ctx, client.Options(), "uploads")
		if err != nil {
			f.Fatal(err)
		}
		presigners = append(presigners, p)
	}
	f.Fuzz(func(t *testing.T, key, contentType, akid, secret, token string, size, ttlSeconds, unix int64) {
		if ttlSeconds < 1 || ttlSeconds > int64(config.MaxURLTTL/time.Second) || unix < 0 || unix > 253402300799 {
			t.Skip()
		}
		creds.c = aws.Credentials{AccessKeyID: akid, SecretAccessKey: secret, SessionToken: token}
		r := presignPut{creds: creds.c, at: time.Unix(unix, 0), expires: time.Duration(ttlSeconds) * time.Second, contentType: contentType, size: size}
		for _, p := range presigners {
			up, err := p.Put(ctx, key, contentType, size, r.expires, r.at)
			if !visibleASCII(contentType) || size < 1 || key == "" || key[0] == '/' {
				if err == nil {
					t.Fatalf("put(%q, %q, %d) signed", key, contentType, size)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := p.endpoint.presignWithSDK(ctx, key, r)
			if err != nil {
				t.Fatal(err)
			}
			if up.URL != want {
				t.Fatalf("URL differs from v4.Signer's\n ours: %s\n sdk:  %s", up.URL, want)
			}
			// The same bound to the bytes of key.
			sum := sha256.Sum256([]byte(key))
			r.checksum = base64.StdEncoding.EncodeToString(sum[:])
			up, err = p.PutChecksum(ctx, key, contentType, r.checksum, size, r.expires, r.at)
			if err != nil {
				t.Fatal(err)
			}
			if want, _, err = p.endpoint.presignWithSDK(ctx, key, r); err != nil {
				t.Fatal(err)
			}
			if up.URL != want {
				t.Fatalf("checksum URL differs from v4.Signer's\n ours: %s\n sdk:  %s", up.URL, want)
			}
			r.checksum = ""
		}
	})
}
