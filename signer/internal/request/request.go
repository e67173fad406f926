// Package request reads a sign or multipart create: the Idempotency-Key
// header and the JSON body, each failure a 4xx apierr.Error with its
// stable code; a fast path for the common body, encoding/json for the
// rest, the same values either way (FuzzParseSignFast).
package request

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
	"unicode"
	"unicode/utf8"

	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/presign"
)

// Request limits. The body is two small fields; anything longer is not a
// sign request.
const (
	MaxBodyBytes = 4 << 10
	MaxKeyLen    = 255
)

// Header names of a sign request.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotency-Replayed"
)

// Sign is a validated POST /uploads/sign.
type Sign struct {
	Key           string // the Idempotency-Key
	ContentType   string
	ContentLength int64
	// Checksum is a sign's checksumSHA256 (base64, checked), or "".
	Checksum string
	// ChecksumAlgorithm is a multipart create's checksumAlgorithm:
	// "SHA256" (each part then signed with its checksum), or "".
	ChecksumAlgorithm string
	// Filename is the name the uploader gave the file (at most
	// MaxFilenameBytes of UTF-8, no control characters), or "": kept with
	// the grant for its downloads' Content-Disposition, never in the key.
	Filename string
}

// MaxFilenameBytes is the longest filename a sign or a create takes, in
// bytes of UTF-8.
const MaxFilenameBytes = 255

// checksumSHA256 is the one checksumAlgorithm a multipart create takes.
const ChecksumSHA256 = "SHA256"

// HasChecksum is whether req binds its upload to its bytes: a sign with
// checksumSHA256, a multipart create with checksumAlgorithm.
func (r Sign) HasChecksum() bool { return r.Checksum != "" || r.ChecksumAlgorithm != "" }

// Policy is what a request may ask for.
type Policy struct {
	maxObject    int64
	contentTypes map[string]bool
	// accepted lists contentTypes, sorted, for the 415's message.
	accepted string
	// multipart: the body is a multipart create's (checksumAlgorithm),
	// else a sign's (checksumSHA256).
	multipart bool
}

func NewPolicy(maxObject int64, contentTypes map[string]bool) Policy {
	types := make([]string, 0, len(contentTypes))
	for t := range contentTypes {
		types = append(types, t)
	}
	slices.Sort(types)
	return Policy{maxObject: maxObject, contentTypes: contentTypes, accepted: strings.Join(types, ", ")}
}

// NewMultipartPolicy is a multipart create's: a sign's, with
// checksumAlgorithm in place of checksumSHA256.
func NewMultipartPolicy(maxObject int64, contentTypes map[string]bool) Policy {
	p := NewPolicy(maxObject, contentTypes)
	p.multipart = true
	return p
}

// wireSign is the JSON body; pointers tell a missing field from a zero.
type wireSign struct {
	ContentType       *string `json:"contentType"`
	ContentLength     *int64  `json:"contentLength"`
	ChecksumSHA256    *string `json:"checksumSHA256"`
	ChecksumAlgorithm *string `json:"checksumAlgorithm"`
	Filename          *string `json:"filename"`
}

// Decode validates the Idempotency-Key header value and the body.
// Every failure is a 4xx apierr.Error; it never panics on any input.
func Decode(key string, body io.Reader, p Policy) (Sign, *apierr.Error) {
	if key == "" {
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeKeyRequired, "the %s header is required", HeaderIdempotencyKey)
	}
	if !validIdempotencyKey(key) {
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeKeyInvalid,
			"%s must be 1 to %d visible ASCII characters", HeaderIdempotencyKey, MaxKeyLen)
	}
	if body == nil {
		body = http.NoBody
	}
	buf := bodyBuffers.Get().(*[MaxBodyBytes + 1]byte)
	defer bodyBuffers.Put(buf)
	n, err := readFull(body, buf[:])
	if err != nil {
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "could not read the body")
	}
	if n > MaxBodyBytes {
		return Sign{}, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeTooLarge, "the request body is above %d bytes", MaxBodyBytes)
	}
	raw := buf[:n]

	req, ok := parseSignFast(raw)
	if !ok {
		var aerr *apierr.Error
		if req, aerr = decodeSlow(raw, p); aerr != nil {
			return Sign{}, aerr
		}
	}
	if req.Checksum != "" && (p.multipart || !presign.CheckSHA256(req.Checksum)) {
		if p.multipart {
			return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "a multipart upload takes checksumAlgorithm, and each part's checksumSHA256 when its parts are signed")
		}
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "checksumSHA256 must be the base64 of the object's SHA-256: 44 characters")
	}
	req.Key = key
	return check(req, p)
}

// decodeSlow decodes a sign or multipart create body parseSignFast did not
// take, with encoding/json.
func decodeSlow(raw []byte, p Policy) (Sign, *apierr.Error) {
	var w wireSign
	if aerr := decodeStrict(bytes.Clone(raw), &w); aerr != nil {
		return Sign{}, aerr
	}
	switch {
	case w.ContentType == nil || *w.ContentType == "":
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "contentType is required")
	case w.ContentLength == nil:
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "contentLength is required")
	case w.ChecksumAlgorithm != nil && !p.multipart:
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "checksumAlgorithm is a multipart upload's; a sign takes checksumSHA256")
	case w.ChecksumAlgorithm != nil && *w.ChecksumAlgorithm != ChecksumSHA256:
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "checksumAlgorithm must be %q", ChecksumSHA256)
	case w.ChecksumSHA256 != nil && *w.ChecksumSHA256 == "":
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "checksumSHA256 must be the base64 of the object's SHA-256: 44 characters")
	}
	req := Sign{ContentType: *w.ContentType, ContentLength: *w.ContentLength}
	if w.ChecksumSHA256 != nil {
		req.Checksum = *w.ChecksumSHA256
	}
	if w.ChecksumAlgorithm != nil {
		req.ChecksumAlgorithm = *w.ChecksumAlgorithm
	}
	if w.Filename != nil {
		if !ValidFilename(*w.Filename) {
			return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "filename must be 1 to %d bytes of UTF-8 without control characters", MaxFilenameBytes)
		}
		req.Filename = *w.Filename
	}
	return req, nil
}

// ValidFilename is whether name may be a grant's filename: 1 to
// MaxFilenameBytes bytes of valid UTF-8, no control character (C0, DEL,
// C1), which a header or a log line would carry further.
func ValidFilename(name string) bool {
	if name == "" || len(name) > MaxFilenameBytes || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// check checks req's type and length against p.
func check(req Sign, p Policy) (Sign, *apierr.Error) {
	ct, cl := req.ContentType, req.ContentLength
	switch {
	case ct == "":
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "contentType is required")
	case cl <= 0:
		return Sign{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "contentLength must be at least 1")
	}
	if !p.contentTypes[ct] {
		return Sign{}, apierr.New(http.StatusUnsupportedMediaType, apierr.CodeUnsupportedType,
			"contentType is not one this service accepts: use one of %s", p.accepted)
	}
	if cl > p.maxObject {
		return Sign{}, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeTooLarge, "contentLength is above the maximum of %d bytes", p.maxObject)
	}
	return req, nil
}

// bodyBuffers hold a sign body while it is read and parsed: one byte more
// than the largest body, to tell a body that is too long.
var bodyBuffers = sync.Pool{New: func() any { return new([MaxBodyBytes + 1]byte) }}

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
func parseSignFast(b []byte) (req Sign, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return Sign{}, false
	}
	var haveType, haveLen, haveSum bool
	for {
		i = skipSpace(b, i+1)
		name, j, ok := plainString(b, i)
		if !ok {
			return Sign{}, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return Sign{}, false
		}
		i = skipSpace(b, i+1)
		var v []byte
		switch string(name) {
		case "contentType":
			if haveType {
				return Sign{}, false
			}
			if v, i, ok = plainString(b, i); !ok {
				return Sign{}, false
			}
			req.ContentType, haveType = string(v), true
		case "checksumSHA256":
			if haveSum {
				return Sign{}, false
			}
			if v, i, ok = plainString(b, i); !ok {
				return Sign{}, false
			}
			req.Checksum, haveSum = string(v), true
		case "contentLength":
			if haveLen {
				return Sign{}, false
			}
			if req.ContentLength, i, ok = plainLength(b, i); !ok {
				return Sign{}, false
			}
			haveLen = true
		default:
			return Sign{}, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return Sign{}, false
		}
		if b[i] == '}' {
			break
		}
		if b[i] != ',' {
			return Sign{}, false
		}
	}
	if !haveType || !haveLen || (haveSum && req.Checksum == "") || skipSpace(b, i+1) != len(b) {
		return Sign{}, false
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

// DecodeJSON reads a body of at most limit bytes holding exactly one JSON
// object of v's shape, no unknown fields. Every failure is a 4xx apierr.Error.
func DecodeJSON(body io.Reader, limit int, v any) *apierr.Error {
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
	if len(k) == 0 || len(k) > MaxKeyLen {
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

// ValidKey is whether k may be an Idempotency-Key: 1 to MaxKeyLen
// characters of 0x21–0x7E.
func ValidKey(k string) bool { return validIdempotencyKey(k) }
