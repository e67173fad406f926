package presign

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"sort"
	"strconv"
	"time"
)

// Read is how a presigned GET makes S3 answer: the response-* overrides
// it signs, which S3 applies to its answer whatever metadata the object
// was stored with.
type Read struct {
	ContentType        string // response-content-type
	ContentDisposition string // response-content-disposition
	CacheControl       string // response-cache-control
}

// Get signs a GET of key valid for ttl from now, for the same endpoint as
// Put (MINTGATE_S3_ENDPOINT, where readers reach S3), whose only signed
// header is host and whose query pins r's response-* overrides: a URL
// whose query is changed (another type, another disposition) fails its
// signature. It is SigV4 query signing as in sigv4.go, for GetObject.
func (p *Presigner) Get(ctx context.Context, key string, r Read, ttl time.Duration, now time.Time) (string, error) {
	if key == "" || key[0] == '/' {
		return "", fmt.Errorf("presign get %q: not an object key", key)
	}
	if ttl < time.Second || ttl > 7*24*time.Hour {
		return "", fmt.Errorf("presign get %s: ttl %v: want 1 s to 7 days", key, ttl)
	}
	creds, err := p.creds.Retrieve(ctx)
	if err != nil {
		return "", fmt.Errorf("presign get %s: credentials: %w", key, err)
	}
	var dayBuf [8]byte
	k := p.keys.get(creds, p.scope, now.UTC().AppendFormat(dayBuf[:0], "20060102"))
	date := now.UTC().Format(sigv4Date)

	params := [][2]string{
		{"X-Amz-Algorithm", sigv4Algorithm},
		{"X-Amz-Credential", creds.AccessKeyID + "/" + k.day + "/" + p.scope.region + "/" + p.scope.service + "/aws4_request"},
		{"X-Amz-Date", date},
		{"X-Amz-Expires", strconv.FormatInt(int64(ttl/time.Second), 10)},
		{"X-Amz-SignedHeaders", "host"},
		{"x-id", "GetObject"},
	}
	if creds.SessionToken != "" {
		params = append(params, [2]string{"X-Amz-Security-Token", creds.SessionToken})
	}
	for _, o := range [][2]string{{"response-cache-control", r.CacheControl}, {"response-content-disposition", r.ContentDisposition}, {"response-content-type", r.ContentType}} {
		if o[1] != "" {
			params = append(params, o)
		}
	}
	// The canonical query: escaped names and values, sorted by name.
	sort.Slice(params, func(i, j int) bool { return params[i][0] < params[j][0] })
	buf := make([]byte, 0, len(p.urlPrefix)+3*len(key)+1024)
	buf = append(buf, p.urlPrefix...)
	buf = appendPathEscaped(buf, key)
	path := string(buf[p.pathAt:])
	var query []byte
	for i, kv := range params {
		if i > 0 {
			query = append(query, '&')
		}
		query = appendQueryEscaped(query, kv[0])
		query = append(query, '=')
		query = appendQueryEscaped(query, kv[1])
	}
	canonical := "GET\n" + path + "\n" + string(query) + "\nhost:" + p.scope.host + "\n\nhost\n" + unsignedPayload
	sum := sha256.Sum256([]byte(canonical))
	toSign := sigv4Algorithm + "\n" + date + "\n" + k.day + "/" + p.scope.region + "/" + p.scope.service + "/aws4_request\n" + hex.EncodeToString(sum[:])
	m := k.macs.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(toSign))
	sig := hex.EncodeToString(m.Sum(nil))
	k.macs.Put(m)
	return string(buf) + "?" + string(query) + "&X-Amz-Signature=" + sig, nil
}
