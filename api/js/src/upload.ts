// One upload, start to end: a single presigned PUT up to the signer's
// limit, a multipart upload above it.

import type { CompletedPart, MultipartGrant, SignRequest, SignResponse, Signer } from "./api.js";
import { PartChecksums, sha256Base64 } from "./checksum.js";
import { MintgateError, newIdempotencyKey } from "./errors.js";
import { PartURLs } from "./parts.js";
import { type PutAnswer, TransportError, isExpired } from "./put.js";
import { abortError, backoffDelay, sleep, throwIfAborted } from "./wait.js";

/** Progress of one upload, told to onProgress as bytes leave. */
export interface Progress {
  /** Bytes S3 has (or is receiving) so far. */
  loaded: number;
  /** The file's size. */
  total: number;
  /** For multipart uploads: the part whose progress changed, and each part's bytes so far. */
  part?: { partNumber: number; loaded: number; size: number; done: boolean };
}

export interface UploadOptions {
  /** The media type to sign (default the Blob's type). */
  contentType?: string;
  /** The file's name, kept with the grant for its downloads' Content-Disposition (sent only when it is at most 255 bytes of UTF-8 without control characters). */
  filename?: string;
  /** Aborting it stops the upload; a multipart grant is then aborted and its bytes given back at once (not its token). */
  signal?: AbortSignal;
  onProgress?: (p: Progress) => void;
  /** The Idempotency-Key of the sign or create (default a new random one): pass the same to retry an upload whose answer was lost. */
  idempotencyKey?: string;
  /** Told the single PUT's grant as soon as the signer answers, before the PUT. */
  onSign?: (grant: SignResponse) => void;
  /** Told the multipart grant as soon as it exists: keep it to resume after a reload. */
  onGrant?: (grant: MultipartGrant) => void;
  /** A multipart grant of an earlier try of this same file: its uploaded parts are kept, the rest uploaded, then it is completed. */
  resume?: MultipartGrant;
  /** Force multipart (true) or a single PUT (false); default: multipart above Limits.maxObjectBytes. */
  multipart?: boolean;
  /**
   * "sha256" (the default): the file's SHA-256 (each part's, for a
   * multipart upload) is computed with WebCrypto and signed into its URL,
   * so S3 refuses any other bytes (the upload fails with
   * "checksum_mismatch") and a stolen URL is useless for other content.
   * false: no checksum (unless the signer requires one: 400
   * "checksum_required"). A single PUT's file is read whole to hash it.
   */
  checksum?: "sha256" | false;
}

/** What an upload ends with. */
export interface UploadResult {
  urlId: string;
  key: string;
  size: number;
  multipart: boolean;
}

/**
 * HASH_WHOLE_MAX is the largest file a checksummed upload hashes whole
 * (and so holds in memory at once) for a single PUT: a larger one is sent
 * as a multipart upload, its parts hashed one by one.
 */
export const HASH_WHOLE_MAX = 256 * 1024 * 1024;

/** upload sends file with the client's signer; see Client.upload in the README. */
export async function upload(client: Signer, file: Blob, opts: UploadOptions = {}): Promise<UploadResult> {
  throwIfAborted(opts.signal);
  const contentType = opts.contentType || file.type || "application/octet-stream";
  let multipart = opts.multipart ?? (opts.resume !== undefined ? true : undefined);
  let partBatch = 100;
  const checksum = (opts.checksum ?? "sha256") === "sha256";
  if (multipart === undefined || multipart) {
    const limits = await client.limits({ signal: opts.signal });
    // WebCrypto hashes a whole buffer: a file hashed whole is read into
    // memory whole, so a large one goes in parts, each hashed on its own.
    multipart ??= file.size > limits.maxObjectBytes || (checksum && file.size > HASH_WHOLE_MAX);
    partBatch = limits.maxPartsPerRequest;
  }
  const idempotencyKey = opts.idempotencyKey ?? newIdempotencyKey();
  const req: SignRequest = { contentType, contentLength: file.size };
  if (opts.filename && validFilename(opts.filename)) req.filename = opts.filename;
  if (!multipart) {
    if (checksum) req.checksumSHA256 = await sha256Base64(file);
    throwIfAborted(opts.signal);
    const grant = await client.sign(req, { idempotencyKey, signal: opts.signal });
    opts.onSign?.(grant);
    await putSingle(client, grant, file, opts);
    return { urlId: grant.urlId, key: grant.key, size: file.size, multipart: false };
  }
  if (checksum) req.checksumAlgorithm = "SHA256";
  const grant = opts.resume ?? (await client.createMultipart(req, { idempotencyKey, signal: opts.signal }));
  opts.onGrant?.(grant);
  try {
    const done = await uploadParts(client, grant, file, partBatch, opts);
    throwIfAborted(opts.signal);
    const res = await client.complete(grant.urlId, done, { signal: opts.signal });
    return { urlId: res.urlId, key: res.key, size: res.size, multipart: true };
  } catch (err) {
    if (opts.signal?.aborted) {
      // The caller gave up: give the tokens back now rather than at the
      // grant's end. The signal is spent, so this call runs without it.
      await client.abort(grant.urlId).catch(() => {});
      throw abortError(opts.signal);
    }
    if (err instanceof MintgateError) err.grant ??= grant;
    throw err;
  }
}

/**
 * putSingle PUTs the whole file to a signed URL, retrying network errors
 * and 5xx answers with backoff while the URL lives. A 412 means the object
 * is there already: only this URL can create that key, so an earlier try
 * of ours landed and its answer was lost.
 */
async function putSingle(client: Signer, grant: SignResponse, file: Blob, opts: UploadOptions): Promise<void> {
  const total = file.size;
  const onSent = (sent: number) => opts.onProgress?.({ loaded: Math.min(sent, total), total });
  for (let failures = 0; ; failures++) {
    let answer: PutAnswer | undefined;
    try {
      answer = await client.put(grant.url, grant.headers, file, onSent, opts.signal);
    } catch (err) {
      if (opts.signal?.aborted) throw abortError(opts.signal);
      if (!(err instanceof TransportError) || failures >= client.retries) throw err;
    }
    if (answer && ((answer.status >= 200 && answer.status < 300) || answer.status === 412)) {
      onSent(total);
      return;
    }
    if (answer && isExpired(answer)) {
      throw new MintgateError(403, "url_expired", "the upload URL expired before S3 took the file; its token comes back after the grace");
    }
    if (answer && isBadDigest(answer)) throw checksumMismatch(answer, "the file");
    if (answer && (answer.status < 500 || failures >= client.retries)) {
      throw new MintgateError(answer.status, "upload_failed", `S3 refused the PUT: ${answer.status} ${answer.body.slice(0, 200)}`);
    }
    onSent(0);
    await sleep(backoffDelay(failures, client.backoff, client.random), opts.signal);
  }
}

/**
 * uploadParts PUTs every part S3 does not hold yet, client.concurrency at a
 * time, and returns every part with its ETag, ascending.
 */
async function uploadParts(client: Signer, grant: MultipartGrant, file: Blob, batch: number, opts: UploadOptions): Promise<CompletedPart[]> {
  const count = Math.ceil(file.size / grant.partSize);
  if (count !== grant.partCount) {
    throw new MintgateError(0, "size_mismatch", `the grant has ${grant.partCount} parts of ${grant.partSize} bytes, the file ${file.size} bytes`);
  }
  const sizeOf = (n: number) => (n < count ? grant.partSize : file.size - (count - 1) * grant.partSize);
  const etags = new Map<number, string>();
  // A checksummed grant signs each part with its SHA-256, hashed ahead of
  // the uploads (one part at a time) so that part URLs still go in batches.
  const sums = grant.checksumAlgorithm === "SHA256" ? new PartChecksums(file, grant.partSize) : undefined;
  const urls = new PartURLs(client, grant, batch, sums);
  if (opts.resume) {
    for (const p of await client.listParts(grant.urlId, { signal: opts.signal })) {
      if (p.partNumber >= 1 && p.partNumber <= count && p.size === sizeOf(p.partNumber)) {
        etags.set(p.partNumber, p.etag);
        urls.markDone(p.partNumber);
      }
    }
  }
  const loaded = new Map<number, number>();
  for (const n of etags.keys()) loaded.set(n, sizeOf(n));
  let sum = [...loaded.values()].reduce((a, b) => a + b, 0);
  const report = (n: number, sent: number, done: boolean) => {
    sum += sent - (loaded.get(n) ?? 0);
    loaded.set(n, sent);
    opts.onProgress?.({ loaded: sum, total: file.size, part: { partNumber: n, loaded: sent, size: sizeOf(n), done } });
  };
  const todo: number[] = [];
  for (let n = 1; n <= count; n++) if (!etags.has(n)) todo.push(n);
  // One failed part stops the others: the upload is left for a resume.
  const stop = new AbortController();
  const onAbort = () => stop.abort(abortError(opts.signal));
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  // A copy: the workers shift todo while the prefetch walks it.
  sums?.prefetch([...todo], stop.signal).catch(() => {}); // a part whose hashing failed fails in its own worker
  const worker = async () => {
    for (let n = todo.shift(); n !== undefined; n = todo.shift()) {
      const start = (n - 1) * grant.partSize;
      const body = file.slice(start, start + sizeOf(n));
      etags.set(n, await uploadPart(client, urls, n, body, (sent, done) => report(n, sent, done), stop.signal));
      urls.markDone(n);
    }
  };
  try {
    const workers = Array.from({ length: Math.min(client.concurrency, todo.length) }, worker);
    const results = await Promise.allSettled(workers.map((w) => w.catch((err) => {
      stop.abort(err);
      throw err;
    })));
    throwIfAborted(opts.signal);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) throw stop.signal.reason ?? failed.reason;
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
  }
  return [...etags.entries()].sort((a, b) => a[0] - b[0]).map(([partNumber, etag]) => ({ partNumber, etag }));
}

/**
 * uploadPart PUTs one part until S3 takes it: a network error or a 5xx is
 * retried with backoff and jitter, a 403 (an expired or refused URL) is
 * retried with a newly signed URL, which costs no token.
 */
async function uploadPart(
  client: Signer,
  urls: PartURLs,
  n: number,
  body: Blob,
  onSent: (sent: number, done: boolean) => void,
  signal?: AbortSignal,
): Promise<string> {
  for (let failures = 0; ; failures++) {
    const part = await urls.get(n, signal);
    let answer: PutAnswer | undefined;
    let cause: unknown;
    try {
      answer = await client.put(part.url, part.headers, body, (sent) => onSent(sent, false), signal);
    } catch (err) {
      if (signal?.aborted) throw abortError(signal);
      if (!(err instanceof TransportError)) throw err;
      cause = err;
    }
    if (answer && answer.status >= 200 && answer.status < 300) {
      if (!answer.etag) {
        throw new MintgateError(answer.status, "etag_hidden", "S3 answered a part without an ETag this page can read: the bucket's CORS rule must expose ETag");
      }
      onSent(body.size, true);
      return answer.etag;
    }
    if (answer && isBadDigest(answer)) throw checksumMismatch(answer, `part ${n}`);
    if (answer?.status === 403) urls.forget(n);
    else if (answer && answer.status < 500 && answer.status !== 429) {
      throw new MintgateError(answer.status, "upload_failed", `S3 refused part ${n}: ${answer.status} ${answer.body.slice(0, 200)}`);
    }
    if (failures >= client.retries) {
      throw new MintgateError(answer?.status ?? 0, "upload_failed", `part ${n} failed ${failures + 1} times`, { cause: cause ?? answer?.body });
    }
    onSent(0, false);
    await sleep(backoffDelay(failures, client.backoff, client.random), signal);
  }
}

/** isBadDigest: S3 refused the bytes, whose SHA-256 is not the one signed. */
function isBadDigest(answer: PutAnswer): boolean {
  return answer.status === 400 && /BadDigest|checksum/i.test(answer.body);
}

function checksumMismatch(answer: PutAnswer, what: string): MintgateError {
  return new MintgateError(answer.status, "checksum_mismatch",
    `S3 refused ${what}: its bytes are not those whose SHA-256 was signed (they changed since they were hashed): ${answer.body.slice(0, 200)}`);
}

/** validFilename is whether the signer takes name as a filename: 1 to 255 bytes of UTF-8, no control character. */
export function validFilename(name: string): boolean {
  // eslint-disable-next-line no-control-regex
  return name.length > 0 && new TextEncoder().encode(name).length <= 255 && !/[\u0000-\u001f\u007f-\u009f]/.test(name);
}
