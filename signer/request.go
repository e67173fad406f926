package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/presign"
)

// Request limits. The body is two small fields; anything longer is not a
// sign request.
const (
	maxBodyBytes = 4 << 10
	maxKeyLen    = 255
)

// Header names of a sign request.
const (
	hdrIdempotencyKey = "Idempotency-Key"
	hdrReplayed       = "Idempotency-Replayed"
)

// signRequest is a validated POST /uploads/sign.
type signRequest struct {
	Key           string // the Idempotency-Key
	ContentType   string
	ContentLength int64
	// Checksum is a sign's checksumSHA256 (base64, checked), or "".
	Checksum string
	// ChecksumAlgorithm is a multipart create's checksumAlgorithm:
	// "SHA256" (each part then signed with its checksum), or "".
	ChecksumAlgorithm string
}

// checksumSHA256 is the one checksumAlgorithm a multipart create takes.
const checksumSHA256 = "SHA256"

// hasChecksum is whether req binds its upload to its bytes: a sign with
// checksumSHA256, a multipart create with checksumAlgorithm.
func (r signRequest) hasChecksum() bool { return r.Checksum != "" || r.ChecksumAlgorithm != "" }

// signPolicy is what a request may ask for.
type signPolicy struct {
	maxObject    int64
	contentTypes map[string]bool
	// accepted lists contentTypes, sorted, for the 415's message.
	accepted string
	// multipart: the body is a multipart create's (checksumAlgorithm),
	// else a sign's (checksumSHA256).
	multipart bool
}

func newSignPolicy(maxObject int64, contentTypes map[string]bool) signPolicy {
	types := make([]string, 0, len(contentTypes))
	for t := range contentTypes {
		types = append(types, t)
	}
	slices.Sort(types)
	return signPolicy{maxObject: maxObject, contentTypes: contentTypes, accepted: strings.Join(types, ", ")}
}

// wireSign is the JSON body; pointers tell a missing field from a zero.
type wireSign struct {
	ContentType       *string `json:"contentType"`
	ContentLength     *int64  `json:"contentLength"`
	ChecksumSHA256    *string `json:"checksumSHA256"`
	ChecksumAlgorithm *string `json:"checksumAlgorithm"`
}

// decodeSignRequest validates the Idempotency-Key header value and the body.
// Every failure is a 4xx apierr.Error; it never panics on any input.
func decodeSignRequest(key string, body io.Reader, p signPolicy) (signRequest, *apierr.Error) {
	if key == "" {
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeKeyRequired, "the %s header is required", hdrIdempotencyKey)
	}
	if !validIdempotencyKey(key) {
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeKeyInvalid,
			"%s must be 1 to %d visible ASCII characters", hdrIdempotencyKey, maxKeyLen)
	}
	if body == nil {
		body = http.NoBody
	}
	buf := bodyBuffers.Get().(*[maxBodyBytes + 1]byte)
	defer bodyBuffers.Put(buf)
	n, err := readFull(body, buf[:])
	if err != nil {
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "could not read the body")
	}
	if n > maxBodyBytes {
		return signRequest{}, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeTooLarge, "the request body is above %d bytes", maxBodyBytes)
	}
	raw := buf[:n]

	req, ok := parseSignFast(raw)
	if !ok {
		var aerr *apierr.Error
		if req, aerr = decodeSlow(raw, p); aerr != nil {
			return signRequest{}, aerr
		}
	}
	if req.Checksum != "" && (p.multipart || !presign.CheckSHA256(req.Checksum)) {
		if p.multipart {
			return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "a multipart upload takes checksumAlgorithm, and each part's checksumSHA256 when its parts are signed")
		}
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "checksumSHA256 must be the base64 of the object's SHA-256: 44 characters")
	}
	req.Key = key
	return checkSignRequest(req, p)
}

// decodeSlow decodes a sign or multipart create body parseSignFast did not
// take, with encoding/json.
func decodeSlow(raw []byte, p signPolicy) (signRequest, *apierr.Error) {
	var w wireSign
	if aerr := decodeStrict(bytes.Clone(raw), &w); aerr != nil {
		return signRequest{}, aerr
	}
	switch {
	case w.ContentType == nil || *w.ContentType == "":
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "contentType is required")
	case w.ContentLength == nil:
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "contentLength is required")
	case w.ChecksumAlgorithm != nil && !p.multipart:
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "checksumAlgorithm is a multipart upload's; a sign takes checksumSHA256")
	case w.ChecksumAlgorithm != nil && *w.ChecksumAlgorithm != checksumSHA256:
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "checksumAlgorithm must be %q", checksumSHA256)
	case w.ChecksumSHA256 != nil && *w.ChecksumSHA256 == "":
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "checksumSHA256 must be the base64 of the object's SHA-256: 44 characters")
	}
	req := signRequest{ContentType: *w.ContentType, ContentLength: *w.ContentLength}
	if w.ChecksumSHA256 != nil {
		req.Checksum = *w.ChecksumSHA256
	}
	if w.ChecksumAlgorithm != nil {
		req.ChecksumAlgorithm = *w.ChecksumAlgorithm
	}
	return req, nil
}

// checkSignRequest checks req's type and length against p.
func checkSignRequest(req signRequest, p signPolicy) (signRequest, *apierr.Error) {
	ct, cl := req.ContentType, req.ContentLength
	switch {
	case ct == "":
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "contentType is required")
	case cl <= 0:
		return signRequest{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "contentLength must be at least 1")
	}
	if !p.contentTypes[ct] {
		return signRequest{}, apierr.New(http.StatusUnsupportedMediaType, apierr.CodeUnsupportedType,
			"contentType is not one this service accepts: use one of %s", p.accepted)
	}
	if cl > p.maxObject {
		return signRequest{}, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeTooLarge, "contentLength is above the maximum of %d bytes", p.maxObject)
	}
	return req, nil
}

// bodyBuffers hold a sign body while it is read and parsed: one byte more
// than the largest body, to tell a body that is too long.
var bodyBuffers = sync.Pool{New: func() any { return new([maxBodyBytes + 1]byte) }}

// readFull reads r into buf until buf is full or r ends, and returns how
// many bytes it read; the end of r is not an error.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// decodeStrict decodes raw with encoding/json into v: exactly one JSON
// object of v's fields, no unknown ones. Every failure is a 400 apierr.Error.
func decodeStrict(raw []byte, v any) *apierr.Error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "%s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "the body must be exactly one JSON object")
	}
	return nil
}

// parseSignFast reads the sign body every client sends,
// {"contentType":"…","contentLength":N} with an optional
// "checksumSHA256":"…" (any order, any JSON whitespace), without
// reflection or allocations beyond the strings. Anything else — escapes in
// a string, another field, a repeated one, a number that is not plain
// positive digits of at most 18, a field name in another case
// (encoding/json matches names case-insensitively) — is not ok, and
// decodeStrict decides it: what parseSignFast accepts, decodeStrict would
// have decoded to the same values (FuzzParseSignFast). The checksum's
// form is checked by the caller.
func parseSignFast(b []byte) (req signRequest, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return signRequest{}, false
	}
	var haveType, haveLen, haveSum bool
	for {
		i = skipSpace(b, i+1)
		name, j, ok := plainString(b, i)
		if !ok {
			return signRequest{}, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return signRequest{}, false
		}
		i = skipSpace(b, i+1)
		var v []byte
		switch string(name) {
		case "contentType":
			if haveType {
				return signRequest{}, false
			}
			if v, i, ok = plainString(b, i); !ok {
				return signRequest{}, false
			}
			req.ContentType, haveType = string(v), true
		case "checksumSHA256":
			if haveSum {
				return signRequest{}, false
			}
			if v, i, ok = plainString(b, i); !ok {
				return signRequest{}, false
			}
			req.Checksum, haveSum = string(v), true
		case "contentLength":
			if haveLen {
				return signRequest{}, false
			}
			if req.ContentLength, i, ok = plainLength(b, i); !ok {
				return signRequest{}, false
			}
			haveLen = true
		default:
			return signRequest{}, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return signRequest{}, false
		}
		if b[i] == '}' {
			break
		}
		if b[i] != ',' {
			return signRequest{}, false
		}
	}
	if !haveType || !haveLen || (haveSum && req.Checksum == "") || skipSpace(b, i+1) != len(b) {
		return signRequest{}, false
	}
	return req, true
}

// plainLength reads plain positive digits, at most 18, at b[i], and
// returns their value and the index after them.
func plainLength(b []byte, i int) (n int64, next int, ok bool) {
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		n = n*10 + int64(b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || (b[start] == '0' && digits > 1) {
		return 0, 0, false
	}
	return n, i, true
}

// skipSpace is the index of the first byte at or after i that is not JSON
// whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at b[i] that has no escapes and only
// printable ASCII, and returns its bytes and the index after its quote.
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// decodeJSON reads a body of at most limit bytes holding exactly one JSON
// object of v's shape, no unknown fields. Every failure is a 4xx apierr.Error.
func decodeJSON(body io.Reader, limit int, v any) *apierr.Error {
	if body == nil {
		body = http.NoBody
	}
	raw, err := io.ReadAll(io.LimitReader(body, int64(limit)+1))
	if err != nil {
		return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "could not read the body")
	}
	if len(raw) > limit {
		return apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeTooLarge, "the request body is above %d bytes", limit)
	}
	return decodeStrict(raw, v)
}

// validIdempotencyKey is 1 to 255 characters of 0x21–0x7E.
func validIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > maxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// jsonProblem says what is wrong with the body without quoting it.
func jsonProblem(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return "the body must be a JSON object"
		}
		return fmt.Sprintf("%s has the wrong type (%s)", typeErr.Field, typeErr.Value)
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return "the body is not valid JSON"
	case errors.Is(err, io.EOF):
		return "the body is empty; send a JSON object"
	}
	if f, ok := unknownField(err); ok {
		return fmt.Sprintf("unknown field %s", f)
	}
	return "the body is not a valid sign request"
}

// unknownField reads the field name from encoding/json's error for
// DisallowUnknownFields, which has no type of its own.
func unknownField(err error) (string, bool) {
	const prefix = "json: unknown field "
	msg := err.Error()
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		f := msg[len(prefix):]
		if len(f) > 66 {
			f = f[:64] + `…"`
		}
		return f, true
	}
	return "", false
}
