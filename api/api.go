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
	// ChecksumSHA256 is the checksumSHA256 the sign asked for, when it
	// did: a signed header, so S3 refuses any other bytes (400 BadDigest).
	ChecksumSHA256 string `json:"x-amz-checksum-sha256,omitempty"`
}

// MultipartResponse is the 201 body of POST /uploads/multipart (and of its
// replay, with 200): a multipart grant. Its parts are signed by POST
// /uploads/{urlId}/parts; every part is PartSize bytes but the last.
type MultipartResponse struct {
	URLID     string    `json:"urlId"`
	Key       string    `json:"key"`
	UploadID  string    `json:"uploadId"`
	PartSize  int64     `json:"partSize"`
	PartCount int       `json:"partCount"`
	ExpiresAt time.Time `json:"expiresAt"`
	ExpiresIn int64     `json:"expiresIn"`
	// ChecksumAlgorithm is the create's checksumAlgorithm ("SHA256": each
	// part is asked for with its checksumSHA256), absent for none.
	ChecksumAlgorithm string `json:"checksumAlgorithm,omitempty"`
}

// LimitsResponse is the 200 body of GET /uploads/limits: what a client
// reads before an upload to choose a single PUT (a sign, up to
// MaxObjectBytes) or a multipart upload (up to MaxMultipartBytes, cut into
// parts of PartSize bytes but the last), and how many part numbers to ask
// for at once (MaxPartsPerRequest). ContentTypes are sorted.
type LimitsResponse struct {
	MaxObjectBytes     int64    `json:"maxObjectBytes"`
	MaxMultipartBytes  int64    `json:"maxMultipartBytes"`
	PartSize           int64    `json:"partSize"`
	MaxPartsPerRequest int      `json:"maxPartsPerRequest"`
	ContentTypes       []string `json:"contentTypes"`
	// RequireChecksum: signs and multipart creates must carry a checksum
	// (MINTGATE_REQUIRE_CHECKSUM; a tenant's own setting may differ).
	RequireChecksum bool `json:"requireChecksum"`
}

// PartsRequest is the body of POST /uploads/{urlId}/parts: PartNumbers,
// or Parts with each part's checksum (a grant created with
// checksumAlgorithm SHA256 takes Parts only).
type PartsRequest struct {
	PartNumbers []int          `json:"partNumbers,omitempty"`
	Parts       []PartChecksum `json:"parts,omitempty"`
}

// PartChecksum is one part asked for with the base64 SHA-256 of its bytes.
type PartChecksum struct {
	PartNumber     int    `json:"partNumber"`
	ChecksumSHA256 string `json:"checksumSHA256,omitempty"`
}

// PartsResponse is its 200 body: one presigned PUT per part asked for.
type PartsResponse struct {
	Parts []SignedPart `json:"parts"`
}

// SignedPart is one part's presigned PUT and the header it must carry.
type SignedPart struct {
	PartNumber int         `json:"partNumber"`
	URL        string      `json:"url"`
	Method     string      `json:"method"`
	Headers    PartHeaders `json:"headers"`
}

// PartHeaders are the headers a part's PUT must send: its exact length.
type PartHeaders struct {
	ContentLength string `json:"Content-Length"`
	// ChecksumSHA256 is the part's checksum, signed, for a checksummed
	// grant: S3 refuses other bytes (400 BadDigest).
	ChecksumSHA256 string `json:"x-amz-checksum-sha256,omitempty"`
}

// PartList is the 200 body of GET /uploads/{urlId}/parts: what S3 holds.
type PartList struct {
	Parts []ListedPart `json:"parts"`
}

// ListedPart is one uploaded part.
type ListedPart struct {
	PartNumber     int    `json:"partNumber"`
	Size           int64  `json:"size"`
	ETag           string `json:"etag"`
	ChecksumSHA256 string `json:"checksumSHA256,omitempty"`
}

// CompleteRequest is the body of POST /uploads/{urlId}/complete: every
// part of the object, ascending, with the ETag its PUT answered.
type CompleteRequest struct {
	Parts []CompletedPart `json:"parts"`
}

// CompletedPart names one part of a complete.
type CompletedPart struct {
	PartNumber int    `json:"partNumber"`
	ETag       string `json:"etag"`
}

// CompleteResponse is the 200 body of a complete, and of its retries.
type CompleteResponse struct {
	URLID string `json:"urlId"`
	Key   string `json:"key"`
	Size  int64  `json:"size"`
}
