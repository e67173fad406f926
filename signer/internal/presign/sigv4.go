package presign

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// SigV4 query-string signing ("presigning") of mintgate's one request
// shape: a PUT whose signed headers are content-length, content-type, host
// and if-none-match (and x-amz-checksum-sha256 when the grant is bound to
// its bytes), with an unsigned payload and the query PutObject's presign
// carries. It is the algorithm of
// https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html
// written out for that shape: v4.Signer.PresignHTTP is generic (it clones
// the request, parses and re-encodes the query, maps, sorts and joins the
// headers): ~70 allocations a URL, most of what one still cost once the
// SDK's middleware was gone. The URL is held byte for byte equal to the
// SDK's by the tests, by a fuzz test against v4.Signer, and for the
// running configuration by a check against v4.Signer at start
// (presigner.checkAgainstSDK).

const (
	sigv4Algorithm = "AWS4-HMAC-SHA256"
	sigv4Date      = "20060102T150405Z"
	// signedHeaderList is X-Amz-SignedHeaders: sorted, lower case.
	signedHeaderList = "content-length;content-type;host;if-none-match"
	// checksumHeader is signed as a header, never hoisted into the query:
	// S3 verifies the body against it only there.
	checksumHeader = "x-amz-checksum-sha256"
	// unsignedPayload is the payload hash of every presigned S3 request:
	// the body is not known when the URL is signed.
	unsignedPayload = "UNSIGNED-PAYLOAD"
)

// sigv4Scope is what a signature is scoped to besides the day.
type sigv4Scope struct {
	region, service string
	// host is the host header as signed: the endpoint's, without a
	// default port.
	host string
}

// presignPut is one PUT to presign.
type presignPut struct {
	creds       aws.Credentials
	at          time.Time
	expires     time.Duration
	contentType string // visible ASCII: canonical as it is
	size        int64
	// checksum is the base64 SHA-256 the body must have (signed as
	// x-amz-checksum-sha256), or "": base64 is canonical as it is.
	checksum string
}

// signingKeys holds what the current credentials sign with on the current
// UTC day. A signing key is four HMACs of the secret, the day, the region
// and the service, so it is derived again only when the day or the
// credentials change, and swapped atomically so that concurrent signs
// never wait.
type signingKeys struct {
	cur atomic.Pointer[signingKey]
}

// signingKey is the key of one set of credentials on one day, with the
// query values that come from them, escaped once.
type signingKey struct {
	accessKey, secret, token, day string
	key                           []byte
	credential                    string // X-Amz-Credential: <key id>/<day>/<region>/<service>/aws4_request
	tokenParam                    string // "&X-Amz-Security-Token=…", or "" for long-term keys
	// macs are HMAC-SHA256s keyed with key, reused: a fresh one costs
	// five allocations and hashing the key's pads again.
	macs sync.Pool
}

// get returns the signing key of creds in scope s on day (YYYYMMDD).
func (ks *signingKeys) get(creds aws.Credentials, s sigv4Scope, day []byte) *signingKey {
	if k := ks.cur.Load(); k != nil && k.day == string(day) && k.accessKey == creds.AccessKeyID &&
		k.secret == creds.SecretAccessKey && k.token == creds.SessionToken {
		return k
	}
	k := &signingKey{accessKey: creds.AccessKeyID, secret: creds.SecretAccessKey, token: creds.SessionToken, day: string(day)}
	k.key = hmacSHA256([]byte("AWS4"+creds.SecretAccessKey), day)
	k.key = hmacSHA256(k.key, []byte(s.region))
	k.key = hmacSHA256(k.key, []byte(s.service))
	k.key = hmacSHA256(k.key, []byte("aws4_request"))
	k.credential = string(appendQueryEscaped(nil, creds.AccessKeyID+"/"+string(day)+"/"+s.region+"/"+s.service+"/aws4_request"))
	if creds.SessionToken != "" {
		k.tokenParam = string(appendQueryEscaped([]byte("&X-Amz-Security-Token="), creds.SessionToken))
	}
	k.macs.New = func() any { return hmac.New(sha256.New, k.key) }
	ks.cur.Store(k)
	return k
}

func hmacSHA256(key, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return m.Sum(nil)
}

// presignedLen bounds the length of the URL appendPresigned makes after
// the path.
func presignedLen(k *signingKey) int {
	return len(k.credential) + len(k.tokenParam) + 256
}

// appendPresigned completes the URL in dst, whose tail from pathAt is the
// object's escaped path as sent (S3 does not escape it again), with the
// query of r signed under k, and returns it. The canonical request and
// the string to sign are written behind the URL in the same buffer,
// hashed, and cut off again.
func appendPresigned(dst []byte, pathAt int, s sigv4Scope, k *signingKey, r presignPut) string {
	var dateBuf [len(sigv4Date)]byte
	date := r.at.UTC().AppendFormat(dateBuf[:0], sigv4Date)

	path := len(dst)
	dst = append(dst, '?')
	q := len(dst)
	// The query in canonical order: sorted by name, upper case first.
	dst = append(dst, "X-Amz-Algorithm="+sigv4Algorithm+"&X-Amz-Credential="...)
	dst = append(dst, k.credential...)
	dst = append(dst, "&X-Amz-Date="...)
	dst = append(dst, date...)
	dst = append(dst, "&X-Amz-Expires="...)
	dst = strconv.AppendInt(dst, int64(r.expires/time.Second), 10)
	dst = append(dst, k.tokenParam...)
	dst = append(dst, "&X-Amz-SignedHeaders=content-length%3Bcontent-type%3Bhost%3Bif-none-match"...)
	if r.checksum != "" {
		dst = append(dst, "%3B"+checksumHeader...)
	}
	dst = append(dst, "&x-id=PutObject"...)
	end := len(dst)

	// The canonical request.
	dst = append(dst, "PUT\n"...)
	dst = append(dst, dst[pathAt:path]...)
	dst = append(dst, '\n')
	dst = append(dst, dst[q:end]...)
	dst = append(dst, "\ncontent-length:"...)
	dst = strconv.AppendInt(dst, r.size, 10)
	dst = append(dst, "\ncontent-type:"...)
	dst = append(dst, r.contentType...)
	dst = append(dst, "\nhost:"...)
	dst = append(dst, s.host...)
	if r.checksum == "" {
		dst = append(dst, "\nif-none-match:*\n\n"+signedHeaderList+"\n"+unsignedPayload...)
	} else {
		dst = append(dst, "\nif-none-match:*\n"+checksumHeader+":"...)
		dst = append(dst, r.checksum...)
		dst = append(dst, "\n\n"+signedHeaderList+";"+checksumHeader+"\n"+unsignedPayload...)
	}
	canonical := sha256.Sum256(dst[end:])

	// The string to sign.
	dst = append(dst[:end], sigv4Algorithm+"\n"...)
	dst = append(dst, date...)
	dst = append(dst, '\n')
	dst = append(dst, k.day...)
	dst = append(dst, '/')
	dst = append(dst, s.region...)
	dst = append(dst, '/')
	dst = append(dst, s.service...)
	dst = append(dst, "/aws4_request\n"...)
	dst = hex.AppendEncode(dst, canonical[:])
	m := k.macs.Get().(hash.Hash)
	m.Reset()
	m.Write(dst[end:])
	dst = m.Sum(dst) // into the buffer: a local array would escape through hash.Hash
	k.macs.Put(m)
	var sig [sha256.Size]byte
	copy(sig[:], dst[len(dst)-sha256.Size:])

	dst = append(dst[:end], "&X-Amz-Signature="...)
	dst = hex.AppendEncode(dst, sig[:])
	return string(dst)
}

// appendQueryEscaped appends s escaped as SigV4 wants a query name or
// value: everything but the unreserved characters of RFC 3986 as %XX.
func appendQueryEscaped(dst []byte, s string) []byte {
	const upperHex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', upperHex[c>>4], upperHex[c&15])
		}
	}
	return dst
}

// appendPathEscaped appends s escaped as S3 wants an object key in a path:
// as a query value, but '/' stays.
func appendPathEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] != '/' {
			j++
		}
		dst = appendQueryEscaped(dst, s[i:j])
		if j < len(s) {
			dst = append(dst, '/')
		}
		i = j + 1
	}
	return dst
}

func unreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
