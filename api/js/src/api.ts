// The signer's answers, as api/openapi.yaml describes them (and api/api.go
// in Go): the JSON names are mintgate's public interface. And Signer: what
// upload and PartURLs call of a Client, so they need not import it.

import type { Put } from "./put.js";
import type { Backoff } from "./wait.js";

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
  /** Signs and multipart creates must carry a checksum (MINTGATE_REQUIRE_CHECKSUM). */
  requireChecksum: boolean;
}

/** The body of POST /uploads/sign and POST /uploads/multipart. */
export interface SignRequest {
  contentType: string;
  contentLength: number;
  /** A sign: the base64 of the object's SHA-256; S3 then refuses any other bytes. */
  checksumSHA256?: string;
  /** A multipart create: each part is signed with its own checksum. */
  checksumAlgorithm?: "SHA256";
  /** The file's name (at most 255 bytes of UTF-8, no control characters): its downloads' Content-Disposition names it; never part of the key. */
  filename?: string;
}

/** The 201 (or replayed 200) body of POST /uploads/{urlId}/download. */
export interface DownloadResponse {
  /** A presigned GET of the verified object, pinning its type, disposition and `Cache-Control: private`. */
  url: string;
  method: "GET";
  expiresAt: string;
  expiresIn: number;
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
  /** "SHA256" when the create asked for checksums: every part is then signed with its own. */
  checksumAlgorithm?: "SHA256";
}

/** One part's presigned PUT, from POST /uploads/{urlId}/parts. */
export interface SignedPart {
  partNumber: number;
  url: string;
  method: "PUT";
  headers: { "Content-Length": string; "x-amz-checksum-sha256"?: string };
}

/** A part to sign: its number, with the base64 SHA-256 of its bytes for a checksummed grant. */
export interface PartToSign {
  partNumber: number;
  checksumSHA256?: string;
}

/** One part S3 holds, from GET /uploads/{urlId}/parts. */
export interface ListedPart {
  partNumber: number;
  size: number;
  etag: string;
  /** The part's SHA-256 (base64), for a checksummed grant. */
  checksumSHA256?: string;
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

/**
 * Where a grant stands, from GET /uploads/{urlId}. `verifying`: the object
 * arrived and the completer's verification gate has no verdict yet; it ends
 * `completed` or `rejected` (with a reason).
 */
export type UploadState = "pending" | "verifying" | "completed" | "rejected" | "expired" | "refunded" | "aborted";

/** Why the verification gate rejected an upload. */
export type RejectReason = "size_mismatch" | "type_mismatch" | "image_too_large" | "malware" | "scan_limit" | "encoding_not_allowed" | "metadata_not_allowed";

/** The 200 body of GET /uploads/{urlId}. */
export interface StatusResponse {
  urlId: string;
  status: UploadState;
  /** Only with `rejected`. */
  reason?: RejectReason;
  expiresAt: string;
  /** The SHA-256 (base64) a single PUT's URL was bound to. */
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

/**
 * Signer is what an upload calls of its client (a Client is one): the
 * signer's routes an upload uses, with their retries, and the upload's
 * settings. upload and PartURLs are typed against it, not against Client,
 * so that client.ts need not import them nor they client.ts.
 */
export interface Signer {
  /** How many parts of one upload go up at once. */
  readonly concurrency: number;
  /** How often a failed part is retried before the upload fails. */
  readonly retries: number;
  /** The backoff of part retries. */
  readonly backoff: Backoff;
  /** Random numbers in [0, 1) for jitter. */
  readonly random: () => number;
  /** Sends one PUT to S3. */
  readonly put: Put;
  /** The signer's clock now, in ms since the epoch. */
  serverNow(): number;
  limits(opts?: { signal?: AbortSignal }): Promise<Limits>;
  sign(req: SignRequest, opts: { idempotencyKey: string; signal?: AbortSignal }): Promise<SignResponse>;
  createMultipart(req: SignRequest, opts: { idempotencyKey: string; signal?: AbortSignal }): Promise<MultipartGrant>;
  signParts(urlId: string, parts: (number | PartToSign)[], opts?: { signal?: AbortSignal }): Promise<SignedPart[]>;
  listParts(urlId: string, opts?: { signal?: AbortSignal }): Promise<ListedPart[]>;
  complete(urlId: string, parts: CompletedPart[], opts?: { signal?: AbortSignal }): Promise<CompleteResponse>;
  abort(urlId: string, opts?: { signal?: AbortSignal }): Promise<void>;
}
