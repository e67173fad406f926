// The signer's answers, as api/openapi.yaml describes them (and api/api.go
// in Go): the JSON names are mintgate's public interface.

/** GET /uploads/limits: what a client reads to choose how to upload. */
export interface Limits {
  /** The largest object a single presigned PUT may carry (MINTGATE_MAX_OBJECT_BYTES). */
  maxObjectBytes: number;
  /** The largest object a multipart upload may carry (MINTGATE_MAX_MULTIPART_BYTES). */
  maxMultipartBytes: number;
  /** The size of every part of a multipart upload but the last (MINTGATE_MULTIPART_PART_BYTES). */
  partSize: number;
  /** The most part numbers one POST /uploads/{urlId}/parts may ask for. */
  maxPartsPerRequest: number;
  /** The media types the signer accepts (MINTGATE_CONTENT_TYPES). */
  contentTypes: string[];
}

/** The body of POST /uploads/sign and POST /uploads/multipart. */
export interface SignRequest {
  contentType: string;
  contentLength: number;
}

/** The 201 (or replayed 200) body of POST /uploads/sign. */
export interface SignResponse {
  url: string;
  method: "PUT";
  /** Every signed header but Host, to send with the PUT as given (a browser sets Content-Length itself). */
  headers: Record<string, string>;
  urlId: string;
  key: string;
  expiresAt: string;
  expiresIn: number;
}

/** The 201 (or replayed 200) body of POST /uploads/multipart: a multipart grant. */
export interface MultipartGrant {
  urlId: string;
  key: string;
  uploadId: string;
  partSize: number;
  partCount: number;
  expiresAt: string;
  expiresIn: number;
}

/** One part's presigned PUT, from POST /uploads/{urlId}/parts. */
export interface SignedPart {
  partNumber: number;
  url: string;
  method: "PUT";
  headers: { "Content-Length": string };
}

/** One part S3 holds, from GET /uploads/{urlId}/parts. */
export interface ListedPart {
  partNumber: number;
  size: number;
  etag: string;
}

/** One part of a complete: its number and the ETag S3 answered its PUT with. */
export interface CompletedPart {
  partNumber: number;
  etag: string;
}

/** The 200 body of POST /uploads/{urlId}/complete. */
export interface CompleteResponse {
  urlId: string;
  key: string;
  size: number;
}

/** Where a grant stands, from GET /uploads/{urlId}. */
export type UploadState = "pending" | "verifying" | "completed" | "rejected" | "expired" | "refunded" | "aborted";

/** The 200 body of GET /uploads/{urlId}. */
export interface StatusResponse {
  urlId: string;
  status: UploadState;
  expiresAt: string;
  /** When status is "rejected": why (size_mismatch, type_mismatch, image_too_large, malware). */
  reason?: string;
  /** The object's SHA-256 (base64), when it was uploaded with one. */
  checksumSHA256?: string;
}

/** One bucket in GET /uploads/quota. */
export interface Bucket {
  limit: number;
  remaining: number;
  resetSeconds: number;
}

/** The 200 body of GET /uploads/quota. */
export interface QuotaResponse {
  caller: Bucket;
  tenant: Bucket;
  callerBytes?: Bucket;
  tenantBytes?: Bucket;
}

/** Every error answer's body: a stable code and a message for people. */
export interface ErrorBody {
  error: string;
  message: string;
  /** On a 429 of a sign: which bucket was short (caller, tenant, anonymous_all, caller_bytes, ...). */
  scope?: string;
  /** Seconds to wait, as the Retry-After header says. */
  retryAfter?: number;
}
