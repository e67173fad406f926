// Package api is the Go form of the signer's answers that clients decode,
// as openapi.yaml describes them: the signer writes them and the
// integration tests read them, so a field renamed in one is renamed in
// both. The JSON names are the public interface.
package api

import "time"

// SignResponse is the 201 body of POST /uploads/sign, and what a replay
// returns verbatim (200).
type SignResponse struct {
	URL       string        `json:"url"`
	Method    string        `json:"method"`
	Headers   UploadHeaders `json:"headers"`
	URLID     string        `json:"urlId"`
	Key       string        `json:"key"`
	ExpiresAt time.Time     `json:"expiresAt"`
	ExpiresIn int64         `json:"expiresIn"`
}

// UploadHeaders are every signed header but host, to be sent with the PUT
// exactly as given (a browser sets Content-Length itself from the body).
type UploadHeaders struct {
	ContentLength string `json:"Content-Length"`
	ContentType   string `json:"Content-Type"`
	IfNoneMatch   string `json:"If-None-Match"`
}
