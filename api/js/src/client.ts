// The client of the signer's API: every route, each call retried the way
// the API allows (the same Idempotency-Key for every retry of a charged
// call, Retry-After honoured on 429 and 503).

import type {
  CompletedPart,
  CompleteResponse,
  DownloadResponse,
  ErrorBody,
  Limits,
  ListedPart,
  MultipartGrant,
  PartToSign,
  QuotaResponse,
  SignedPart,
  Signer,
  SignRequest,
  SignResponse,
  StatusResponse,
  UploadState,
} from "./api.js";
import { MintgateError } from "./errors.js";
import { type Put, fetchPut, xhrPut } from "./put.js";
import { type Backoff, abortError, backoffDelay, retryAfterSeconds, sleep, throwIfAborted } from "./wait.js";

/** Why the client is waiting before a retry: told to onWait, e.g. for a countdown. */
export interface Wait {
  /** Seconds until the retry: the Retry-After (the retry comes up to 250 ms later, as jitter), or the backoff rounded up. */
  seconds: number;
  /** The status that made it wait (429, 503, 409 request_in_progress, or 0 for a network error). */
  status: number;
  /** The error code of that answer. */
  code: string;
  /** On a 429 of a sign: which bucket was short. */
  scope: string | undefined;
  /** Which route was refused, e.g. "POST /uploads/sign". */
  route: string;
}

export interface ClientOptions {
  /** The signer's origin and path prefix, e.g. "https://example.com/api"; "" (default) for the page's own origin. */
  baseUrl?: string;
  /** A bearer token (JWT), or a function that returns one (called for every request, so it may refresh). */
  token?: string | (() => string | Promise<string>);
  /** For anonymous callers: the tenant, sent as X-Tenant-ID (or a function that returns it). */
  tenant?: string | (() => string);
  /** The fetch to call the signer and S3 with (default globalThis.fetch; given, PUTs use it too instead of XMLHttpRequest). */
  fetch?: typeof fetch;
  /** How many parts of one upload go up at once (default 4). */
  concurrency?: number;
  /** How often a failed request or part is retried before the upload fails (default 5). */
  retries?: number;
  /** How many times a 429 or 503 is waited out before the call fails (default 10). */
  waits?: number;
  /** The longest Retry-After the client waits out; a longer one fails the call at once (default 300 s). */
  maxWaitSeconds?: number;
  /** The backoff of retries after network errors and 5xx answers without Retry-After. */
  backoff?: Backoff;
  /** Called before every wait of a Retry-After or a backoff. */
  onWait?: (wait: Wait) => void;
  /** Random numbers in [0, 1) for jitter (default Math.random; tests seed their own). */
  random?: () => number;
  /**
   * Called once when the signer answers 401 (an expired token, say): the
   * request then goes again, with the same Idempotency-Key, and token is
   * asked for anew. Without it a 401 fails the call.
   */
  onUnauthorized?: () => void | Promise<void>;
  /**
   * true: every call that creates an upload (sign, createMultipart) sends a
   * W3C traceparent of a fresh random trace, sampled (the same on each of
   * its retries), so the signer's span, and the upload's whole trace,
   * continue it; traceIdOf(urlId) then names that trace. Default false:
   * no traceparent is sent.
   */
  traceparent?: boolean;
}

interface CallOptions {
  body?: unknown;
  idempotencyKey?: string;
  signal?: AbortSignal | undefined;
  /** The traceparent to send (ClientOptions.traceparent). */
  traceparent?: string;
}

/** newTraceparent is a W3C traceparent of a fresh random trace and span, sampled. */
function newTraceparent(): string {
  const b = new Uint8Array(24);
  globalThis.crypto.getRandomValues(b);
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `00-${hex.slice(0, 32)}-${hex.slice(32)}-01`;
}

/** How many uploads' trace ids a client remembers (the oldest go first). */
const tracesKept = 1000;

interface Answer<T> {
  status: number;
  body: T;
  headers: Headers;
}

/**
 * Client calls the signer. Every method takes an AbortSignal; every call
 * that spends (sign, createMultipart) takes the Idempotency-Key to use,
 * and retries with that same key, so a retry is answered by the first
 * grant instead of spending again. The package's Client (index.ts) is this
 * one with upload added: upload.ts builds on these calls, so this file
 * does not import it.
 */
export class Client implements Signer {
  readonly baseUrl: string;
  readonly concurrency: number;
  readonly retries: number;
  readonly backoff: Backoff;
  readonly random: () => number;
  /** Sends one PUT to S3 (XMLHttpRequest in a browser unless a fetch was given). */
  readonly put: Put;
  readonly #opts: ClientOptions;
  readonly #fetch: typeof fetch;
  #limits: Promise<Limits> | undefined;
  /** The signer's clock minus ours, in ms, from its last Date header. */
  #skew = 0;
  /** urlId → the trace id its grant was asked for in (ClientOptions.traceparent). */
  readonly #traces = new Map<string, string>();

  constructor(opts: ClientOptions = {}) {
    this.#opts = opts;
    this.baseUrl = (opts.baseUrl ?? "").replace(/\/+$/, "");
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("mintgate: no fetch: pass ClientOptions.fetch");
    this.#fetch = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.put = opts.fetch === undefined && typeof XMLHttpRequest !== "undefined" ? xhrPut : fetchPut(this.#fetch);
    this.concurrency = Math.max(1, opts.concurrency ?? 4);
    this.retries = Math.max(0, opts.retries ?? 5);
    this.backoff = opts.backoff ?? {};
    this.random = opts.random ?? Math.random;
  }

  /** The signer's clock now, as far as its last answer tells, in ms since the epoch. */
  serverNow(): number {
    return Date.now() + this.#skew;
  }

  /** The trace id of the upload's sign or createMultipart (only with ClientOptions.traceparent). */
  traceIdOf(urlId: string): string | undefined {
    return this.#traces.get(urlId);
  }

  /** GET /uploads/limits, fetched once and kept. */
  limits(opts: { signal?: AbortSignal } = {}): Promise<Limits> {
    if (this.#limits === undefined) {
      const p = this.call<Limits>("GET", "/uploads/limits", { signal: opts.signal }).then((a) => a.body);
      this.#limits = p;
      p.catch(() => {
        if (this.#limits === p) this.#limits = undefined;
      });
    }
    return this.#limits;
  }

  /** POST /uploads/sign: a presigned single PUT. Retries reuse idempotencyKey. */
  async sign(req: SignRequest, opts: { idempotencyKey: string; signal?: AbortSignal }): Promise<SignResponse> {
    const tp = this.#traceparent();
    return this.#traced(tp, (await this.call<SignResponse>("POST", "/uploads/sign", { body: req, ...opts, ...tp })).body);
  }

  /** POST /uploads/multipart: a multipart grant. Retries reuse idempotencyKey. */
  async createMultipart(req: SignRequest, opts: { idempotencyKey: string; signal?: AbortSignal }): Promise<MultipartGrant> {
    const tp = this.#traceparent();
    return this.#traced(tp, (await this.call<MultipartGrant>("POST", "/uploads/multipart", { body: req, ...opts, ...tp })).body);
  }

  /**
   * POST /uploads/{urlId}/parts: a presigned PUT per part (at most
   * Limits.maxPartsPerRequest), each a part number or, for a checksummed
   * grant, a part with its checksumSHA256. Free.
   */
  async signParts(urlId: string, parts: (number | PartToSign)[], opts: { signal?: AbortSignal } = {}): Promise<SignedPart[]> {
    const body = parts.every((p) => typeof p === "number")
      ? { partNumbers: parts }
      : { parts: parts.map((p) => (typeof p === "number" ? { partNumber: p } : p)) };
    const a = await this.call<{ parts: SignedPart[] }>("POST", `/uploads/${enc(urlId)}/parts`, { body, signal: opts.signal });
    return a.body.parts;
  }

  /** GET /uploads/{urlId}/parts: the parts S3 holds. */
  async listParts(urlId: string, opts: { signal?: AbortSignal } = {}): Promise<ListedPart[]> {
    return (await this.call<{ parts: ListedPart[] }>("GET", `/uploads/${enc(urlId)}/parts`, { signal: opts.signal })).body.parts;
  }

  /** POST /uploads/{urlId}/complete. Safe to retry: a retry after success answers the same. */
  async complete(urlId: string, parts: CompletedPart[], opts: { signal?: AbortSignal } = {}): Promise<CompleteResponse> {
    return (await this.call<CompleteResponse>("POST", `/uploads/${enc(urlId)}/complete`, { body: { parts }, signal: opts.signal })).body;
  }

  /** DELETE /uploads/{urlId}: aborts a multipart grant and gives its bytes back (its token stays spent). A grant already gone (404, 410) counts as aborted. */
  async abort(urlId: string, opts: { signal?: AbortSignal } = {}): Promise<void> {
    try {
      await this.call<void>("DELETE", `/uploads/${enc(urlId)}`, { signal: opts.signal });
    } catch (err) {
      if (err instanceof MintgateError && (err.status === 404 || err.status === 410)) return;
      throw err;
    }
  }

  /**
   * GET /uploads/{urlId}. With waitSeconds (1 to 30) it is the signer's
   * long poll: the answer comes at the verdict, or after waitSeconds with
   * the status then.
   */
  async status(urlId: string, opts: { signal?: AbortSignal; waitSeconds?: number } = {}): Promise<StatusResponse> {
    const wait = opts.waitSeconds ? `?wait=${Math.min(30, Math.max(0, Math.floor(opts.waitSeconds)))}` : "";
    return (await this.call<StatusResponse>("GET", `/uploads/${enc(urlId)}${wait}`, { signal: opts.signal })).body;
  }

  /**
   * waitForVerdict waits for the verdict of an upload whose bytes are up:
   * the first status other than pending and verifying (completed,
   * rejected, or expired, refunded, aborted), with one long poll
   * (GET /uploads/{urlId}?wait=) after another, never a poll a second. A
   * signer restarted mid-wait answers with the status then, or breaks the
   * connection, and the wait is simply asked again (call retries network
   * errors, 429 and 503). timeoutMs (default 300000) bounds it: then it
   * resolves with the last status seen, still pending or verifying.
   */
  async waitForVerdict(
    urlId: string,
    opts: { timeoutMs?: number; signal?: AbortSignal; onStatus?: (s: StatusResponse) => void } = {},
  ): Promise<StatusResponse> {
    const until = Date.now() + (opts.timeoutMs ?? 300000);
    for (;;) {
      const asked = Date.now();
      const left = Math.ceil((until - asked) / 1000);
      const s = await this.status(urlId, { signal: opts.signal, waitSeconds: Math.min(25, Math.max(1, left)) });
      opts.onStatus?.(s);
      if ((s.status !== "pending" && s.status !== "verifying") || Date.now() >= until) return s;
      // An undecided answer before a second passed: a signer shutting
      // down, or one without ?wait= (older): never more than a poll a second.
      await sleep(asked + 1000 - Date.now(), opts.signal);
    }
  }

  /**
   * POST /uploads/{urlId}/download: a presigned GET of one of the caller's
   * completed uploads, which lives MINTGATE_DOWNLOAD_TTL (default 300 s).
   * A 409 not_completed (still verifying), 410 upload_rejected or 404
   * not_found is a MintgateError. A replay with the same idempotencyKey
   * is free.
   */
  async downloadUrl(urlId: string, opts: { idempotencyKey?: string; signal?: AbortSignal } = {}): Promise<DownloadResponse> {
    return (await this.call<DownloadResponse>("POST", `/uploads/${enc(urlId)}/download`, opts)).body;
  }

  /** GET /uploads/quota. */
  async quota(opts: { signal?: AbortSignal } = {}): Promise<QuotaResponse> {
    return (await this.call<QuotaResponse>("GET", "/uploads/quota", { signal: opts.signal })).body;
  }

  /**
   * waitForStatus polls GET /uploads/{urlId} until the grant is in one of
   * states (default: any but pending and verifying, which waitForVerdict
   * waits for with long polls instead), or timeoutMs passes (then it
   * resolves with the last status seen). onStatus is told every status
   * read, e.g. to show verifying.
   */
  async waitForStatus(
    urlId: string,
    opts: { states?: UploadState[]; timeoutMs?: number; intervalMs?: number; signal?: AbortSignal; onStatus?: (s: StatusResponse) => void } = {},
  ): Promise<StatusResponse> {
    if (!opts.states) return this.waitForVerdict(urlId, { ...opts, timeoutMs: opts.timeoutMs ?? 60000 });
    const until = Date.now() + (opts.timeoutMs ?? 60000);
    const interval = opts.intervalMs ?? 1000;
    for (;;) {
      const s = await this.status(urlId, opts);
      opts.onStatus?.(s);
      const settled = opts.states ? opts.states.includes(s.status) : s.status !== "pending" && s.status !== "verifying";
      if (settled || Date.now() + interval > until) return s;
      await sleep(interval, opts.signal);
    }
  }

  /** A fresh traceparent for a call that creates an upload, if asked for. */
  #traceparent(): { traceparent?: string } {
    return this.#opts.traceparent ? { traceparent: newTraceparent() } : {};
  }

  /** traced remembers the trace a grant was asked in, and returns the grant. */
  #traced<T extends { urlId: string }>(tp: { traceparent?: string }, grant: T): T {
    const id = tp.traceparent?.split("-")[1];
    if (id !== undefined && grant?.urlId) {
      this.#traces.delete(grant.urlId);
      this.#traces.set(grant.urlId, id);
      for (const k of this.#traces.keys()) {
        if (this.#traces.size <= tracesKept) break;
        this.#traces.delete(k);
      }
    }
    return grant;
  }

  async #headers(o: CallOptions): Promise<Headers> {
    const h = new Headers({ Accept: "application/json" });
    const t = this.#opts.token;
    const token = typeof t === "function" ? await t() : t;
    if (token) h.set("Authorization", `Bearer ${token}`);
    else {
      const tenant = typeof this.#opts.tenant === "function" ? this.#opts.tenant() : this.#opts.tenant;
      if (tenant) h.set("X-Tenant-ID", tenant);
    }
    if (o.body !== undefined) h.set("Content-Type", "application/json");
    if (o.idempotencyKey !== undefined) h.set("Idempotency-Key", o.idempotencyKey);
    if (o.traceparent !== undefined) h.set("traceparent", o.traceparent);
    return h;
  }

  /**
   * call sends one request to the signer and retries it: after a network
   * error or a 5xx without Retry-After with backoff (up to retries), and
   * after a 429, a 503 or a 409 request_in_progress for as long as its
   * Retry-After says (up to waits). Every retry is the same request, with
   * the same Idempotency-Key.
   */
  async call<T>(method: string, path: string, o: CallOptions = {}): Promise<Answer<T>> {
    const route = `${method} ${path.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/, "{urlId}")}`;
    const maxWait = this.#opts.maxWaitSeconds ?? 300;
    const waits = this.#opts.waits ?? 10;
    let failures = 0;
    let waited = 0;
    let reauthorized = false;
    for (;;) {
      throwIfAborted(o.signal);
      let res: Response;
      try {
        res = await this.#fetch(this.baseUrl + path, {
          method,
          headers: await this.#headers(o),
          body: o.body === undefined ? undefined : JSON.stringify(o.body),
          signal: o.signal,
          credentials: "same-origin",
        });
      } catch (err) {
        if (o.signal?.aborted) throw abortError(o.signal);
        if (failures >= this.retries) {
          throw new MintgateError(0, "network_error", `${route}: ${String((err as Error)?.message ?? err)}`, { cause: err });
        }
        await this.#pause(backoffDelay(failures++, this.backoff, this.random), { status: 0, code: "network_error", scope: undefined, route }, o.signal);
        continue;
      }
      const date = Date.parse(res.headers.get("Date") ?? "");
      if (!Number.isNaN(date)) this.#skew = date - Date.now();
      if (res.ok) {
        const text = res.status === 204 ? "" : await res.text();
        return { status: res.status, body: (text === "" ? undefined : JSON.parse(text)) as T, headers: res.headers };
      }
      const err = await errorOf(res, route);
      if (res.status === 401 && !reauthorized && this.#opts.onUnauthorized) {
        // A 401 spends nothing, so the same request with a new token is safe.
        reauthorized = true;
        await this.#opts.onUnauthorized();
        continue;
      }
      const retryable = res.status === 429 || res.status === 503 || (res.status === 409 && err.code === "request_in_progress");
      if (retryable && err.retryAfter !== undefined && waited < waits && err.retryAfter <= maxWait) {
        waited++;
        // A little jitter past the Retry-After, never before it: callers
        // refused together do not all come back in the same millisecond.
        const ms = err.retryAfter * 1000 + Math.floor(this.random() * 250);
        await this.#pause(ms, { status: res.status, code: err.code, scope: err.scope, route, seconds: err.retryAfter }, o.signal);
        continue;
      }
      if ((res.status >= 500 || retryable) && err.retryAfter === undefined && failures < this.retries) {
        await this.#pause(backoffDelay(failures++, this.backoff, this.random), { status: res.status, code: err.code, scope: err.scope, route }, o.signal);
        continue;
      }
      throw err;
    }
  }

  async #pause(ms: number, why: Omit<Wait, "seconds"> & { seconds?: number }, signal?: AbortSignal): Promise<void> {
    this.#opts.onWait?.({ ...why, seconds: why.seconds ?? Math.ceil(ms / 1000) });
    await sleep(ms, signal);
  }
}

function enc(urlId: string): string {
  return encodeURIComponent(urlId);
}

async function errorOf(res: Response, route: string): Promise<MintgateError> {
  let body: Partial<ErrorBody> = {};
  try {
    body = (await res.json()) as ErrorBody;
  } catch {
    // not JSON (a proxy's page): the status says enough
  }
  const retryAfter = retryAfterSeconds(res.headers.get("Retry-After"), Date.now()) ?? body.retryAfter;
  const code = body.error ?? `http_${res.status}`;
  const extra: { scope?: string; retryAfter?: number } = {};
  if (body.scope !== undefined) extra.scope = body.scope;
  if (retryAfter !== undefined) extra.retryAfter = retryAfter;
  return new MintgateError(res.status, code, `${route}: ${res.status} ${code}: ${body.message ?? res.statusText}`, extra);
}
