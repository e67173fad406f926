// The errors of the client, and the Idempotency-Keys it makes.

import type { MultipartGrant } from "./api.js";

/** An answer of the signer that is not a success, or a call that never got one. */
export class MintgateError extends Error {
  /** The HTTP status, or 0 when no answer came. */
  readonly status: number;
  /** The stable error code (docs/api.md#errors), or "network_error", "url_expired", "etag_hidden", "checksum_mismatch", "upload_failed". */
  readonly code: string;
  /** On a 429 of a sign: which bucket was short. */
  readonly scope: string | undefined;
  /** Seconds the signer asked to wait. */
  readonly retryAfter: number | undefined;
  /** A multipart grant the failed upload leaves behind: resume it with upload(file, {resume}) or abort it. */
  grant: MultipartGrant | undefined;

  constructor(status: number, code: string, message: string, extra?: { scope?: string; retryAfter?: number; cause?: unknown }) {
    super(message, extra?.cause !== undefined ? { cause: extra.cause } : undefined);
    this.name = "MintgateError";
    this.status = status;
    this.code = code;
    this.scope = extra?.scope;
    this.retryAfter = extra?.retryAfter;
  }
}

/** newIdempotencyKey returns a random UUID (version 4), also where crypto.randomUUID is missing (pages not served over https). */
export function newIdempotencyKey(): string {
  const c = globalThis.crypto;
  if (typeof c?.randomUUID === "function") return c.randomUUID();
  const b = c.getRandomValues(new Uint8Array(16));
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

