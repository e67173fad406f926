// Verifying mintgate's webhooks (docs/webhooks.md) as the Standard Webhooks
// specification says, with WebCrypto only: no runtime dependency, in Node
// 20+, Deno, Bun, Cloudflare Workers and browsers alike.

import type { RejectReason } from "./api.js";

/** The data of an upload.completed webhook: the completed event of docs/events.md. */
export interface UploadCompletedData {
  urlId: string;
  tenant: string;
  key: string;
  size: number;
  etag: string;
  /** RFC 3339, UTC. */
  completedAt: string;
  /** The object's SHA-256 (base64), when it was signed with one. */
  checksumSHA256?: string;
}

/** The data of an upload.rejected webhook: the rejected event of docs/events.md. */
export interface UploadRejectedData {
  urlId: string;
  tenant: string;
  /** Where the object landed; it now lies at quarantine/<tenant>/<urlId>. */
  key: string;
  size: number;
  reason: RejectReason;
  /** RFC 3339, UTC. */
  rejectedAt: string;
  checksumSHA256?: string;
}

/** A webhook's body: one upload event. `timestamp` is when it was first sent (RFC 3339). */
export type WebhookEvent =
  | { type: "upload.completed"; timestamp: string; data: UploadCompletedData }
  | { type: "upload.rejected"; timestamp: string; data: UploadRejectedData };

/** The request's headers: a fetch `Headers`, or a plain object such as Node's `req.headers` (any case). */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/** Why verifyWebhook refused a request. */
export type WebhookFailure =
  | "bad_secret"
  | "missing_headers"
  | "bad_timestamp"
  | "timestamp_too_old"
  | "timestamp_too_new"
  | "no_matching_signature"
  | "bad_payload";

/** verifyWebhook's refusal: answer the request with a 4xx and do not act on it. */
export class WebhookVerificationError extends Error {
  readonly reason: WebhookFailure;

  constructor(reason: WebhookFailure, message: string) {
    super(message);
    this.name = "WebhookVerificationError";
    this.reason = reason;
  }
}

export interface VerifyWebhookOptions {
  /** How far webhook-timestamp may lie from now, in seconds: 300 (5 minutes), as the specification's libraries check. */
  toleranceSeconds?: number;
  /** The time to check the timestamp against; the clock by default. */
  now?: Date;
}

const prefix = "whsec_";
const encoder = new TextEncoder();

/**
 * verifyWebhook checks a webhook request as the Standard Webhooks
 * specification says and returns its parsed body. The signature
 * (`webhook-signature`: space-separated `v1,<base64>`, any one may match)
 * is the HMAC-SHA256 of `<webhook-id>.<webhook-timestamp>.<body>` under
 * the secret's base64-decoded bytes (after `whsec_`), compared in constant
 * time; the timestamp must lie within 5 minutes of now. Pass the body
 * exactly as received (the raw text or bytes, never a re-serialized
 * object). It throws a WebhookVerificationError when anything does not
 * hold. Keep the `webhook-id` of what you handled: a redelivery repeats it.
 */
export async function verifyWebhook(
  secret: string,
  headers: WebhookHeaders,
  body: string | Uint8Array | ArrayBuffer,
  opts: VerifyWebhookOptions = {},
): Promise<WebhookEvent> {
  const key = await hmacKey(secret);
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sigs = header(headers, "webhook-signature");
  if (!id || !ts || !sigs) throw new WebhookVerificationError("missing_headers", "webhook-id, webhook-timestamp or webhook-signature is missing");
  checkTimestamp(ts, opts);
  const bytes = typeof body === "string" ? encoder.encode(body) : body instanceof Uint8Array ? body : new Uint8Array(body);
  const signed = concat(encoder.encode(`${id}.${ts}.`), bytes);
  const want = new Uint8Array(await globalThis.crypto.subtle.sign("HMAC", key, signed));
  let match = false;
  for (const vs of sigs.split(" ")) {
    const comma = vs.indexOf(",");
    if (comma < 0 || vs.slice(0, comma) !== "v1") continue;
    const got = decodeBase64(vs.slice(comma + 1));
    if (got && equal(got, want)) match = true;
  }
  if (!match) throw new WebhookVerificationError("no_matching_signature", "no signature matches");
  try {
    return JSON.parse(new TextDecoder().decode(bytes)) as WebhookEvent;
  } catch (err) {
    throw new WebhookVerificationError("bad_payload", `the body is not JSON: ${String(err)}`);
  }
}

async function hmacKey(secret: string): Promise<CryptoKey> {
  const raw = decodeBase64(secret.startsWith(prefix) ? secret.slice(prefix.length) : secret);
  if (!raw || raw.length === 0) throw new WebhookVerificationError("bad_secret", "the secret is not whsec_ followed by base64");
  return globalThis.crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
}

function header(h: WebhookHeaders, name: string): string {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? "";
  for (const [k, v] of Object.entries(h)) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? v.join(" ") : (v ?? "");
  }
  return "";
}

function checkTimestamp(ts: string, opts: VerifyWebhookOptions): void {
  if (!/^\d{1,12}$/.test(ts)) throw new WebhookVerificationError("bad_timestamp", `webhook-timestamp ${JSON.stringify(ts)} is not Unix seconds`);
  const tolerance = opts.toleranceSeconds ?? 300;
  const now = Math.floor((opts.now ?? new Date()).getTime() / 1000);
  const at = Number(ts);
  if (now - at > tolerance) throw new WebhookVerificationError("timestamp_too_old", `webhook-timestamp is ${now - at}s old`);
  if (at - now > tolerance) throw new WebhookVerificationError("timestamp_too_new", `webhook-timestamp is ${at - now}s ahead`);
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** decodeBase64 reads standard base64 (padding optional); undefined when s is not base64. */
function decodeBase64(s: string): Uint8Array<ArrayBuffer> | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s)) return undefined;
  try {
    return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  } catch {
    return undefined;
  }
}

/** equal compares in time that depends on the lengths only, never on where the bytes differ. */
function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}
