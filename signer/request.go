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
)

// Request limits. The body is two small fields; anything longer is not a
// sign request.
const (
	maxBodyBytes = 4 << 10
	maxKeyLen    = 255
)

// signRequest is a validated POST /uploads/sign.
type signRequest struct {
	Key           string // the Idempotency-Key
	ContentType   string
	ContentLength int64
}

// signPolicy is what a request may ask for.
type signPolicy struct {
	maxObject    int64
	contentTypes map[string]bool
	// accepted lists contentTypes, sorted, for the 415's message.
	accepted string
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
	ContentType   *string `json:"contentType"`
	ContentLength *int64  `json:"contentLength"`
}

// decodeSignRequest validates the Idempotency-Key header value and the body.
// Every failure is a 4xx apiError; it never panics on any input.
func decodeSignRequest(key string, body io.Reader, p signPolicy) (signRequest, *apiError) {
	if key == "" {
		return signRequest{}, newError(http.StatusBadRequest, codeKeyRequired, "the %s header is required", hdrIdempotencyKey)
	}
	if !validIdempotencyKey(key) {
		return signRequest{}, newError(http.StatusBadRequest, codeKeyInvalid,
			"%s must be 1 to %d visible ASCII characters", hdrIdempotencyKey, maxKeyLen)
	}
	if body == nil {
		body = http.NoBody
	}
	raw, err := io.ReadAll(io.LimitReader(body, maxBodyBytes+1))
	if err != nil {
		return signRequest{}, newError(http.StatusBadRequest, codeInvalidRequest, "could not read the body")
	}
	if len(raw) > maxBodyBytes {
		return signRequest{}, newError(http.StatusRequestEntityTooLarge, codeTooLarge, "the request body is above %d bytes", maxBodyBytes)
	}

	var w wireSign
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return signRequest{}, newError(http.StatusBadRequest, codeInvalidRequest, "%s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return signRequest{}, newError(http.StatusBadRequest, codeInvalidRequest, "the body must be exactly one JSON object")
	}
	switch {
	case w.ContentType == nil || *w.ContentType == "":
		return signRequest{}, newError(http.StatusBadRequest, codeInvalidRequest, "contentType is required")
	case w.ContentLength == nil:
		return signRequest{}, newError(http.StatusBadRequest, codeInvalidRequest, "contentLength is required")
	case *w.ContentLength <= 0:
		return signRequest{}, newError(http.StatusBadRequest, codeInvalidRequest, "contentLength must be at least 1")
	}
	if !p.contentTypes[*w.ContentType] {
		return signRequest{}, newError(http.StatusUnsupportedMediaType, codeUnsupportedType,
			"contentType is not one this service accepts: use one of %s", p.accepted)
	}
	if *w.ContentLength > p.maxObject {
		return signRequest{}, newError(http.StatusRequestEntityTooLarge, codeTooLarge, "contentLength is above the maximum of %d bytes", p.maxObject)
	}
	return signRequest{Key: key, ContentType: *w.ContentType, ContentLength: *w.ContentLength}, nil
}

// decodeJSON reads a body of at most limit bytes holding exactly one JSON
// object of v's shape, no unknown fields. Every failure is a 4xx apiError.
func decodeJSON(body io.Reader, limit int, v any) *apiError {
	if body == nil {
		body = http.NoBody
	}
	raw, err := io.ReadAll(io.LimitReader(body, int64(limit)+1))
	if err != nil {
		return newError(http.StatusBadRequest, codeInvalidRequest, "could not read the body")
	}
	if len(raw) > limit {
		return newError(http.StatusRequestEntityTooLarge, codeTooLarge, "the request body is above %d bytes", limit)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return newError(http.StatusBadRequest, codeInvalidRequest, "%s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, codeInvalidRequest, "the body must be exactly one JSON object")
	}
	return nil
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
