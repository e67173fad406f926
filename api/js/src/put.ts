// PUTting bytes to a presigned URL: with XMLHttpRequest in a browser (the
// only way a page sees an upload's progress), with fetch elsewhere.

import { abortError } from "./wait.js";

/** What S3 answered a PUT with. */
export interface PutAnswer {
  status: number;
  /** The ETag header, when the bucket's CORS rule exposes it to a page. */
  etag: string | null;
  /** The answer's body (S3's XML error, if any). */
  body: string;
}

/** A PUT failed before S3 answered (network, DNS, CORS, a reset). */
export class TransportError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TransportError";
  }
}

/** Sends one PUT; onProgress gets the bytes sent so far. */
export type Put = (
  url: string,
  headers: Record<string, string>,
  body: Blob,
  onProgress: (sent: number) => void,
  signal?: AbortSignal,
) => Promise<PutAnswer>;

/**
 * withoutLength drops Content-Length from the headers to send: the URL
 * signs it, but the body sets it (a browser refuses a script's own, and
 * fetch computes it from a Blob).
 */
export function withoutLength(headers: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() !== "content-length") out[k] = v;
  }
  return out;
}

/** fetchPut PUTs with fetch: progress is reported once, when S3 answers. */
export function fetchPut(fetchFn: typeof fetch): Put {
  return async (url, headers, body, onProgress, signal) => {
    let res: Response;
    try {
      res = await fetchFn(url, { method: "PUT", headers: withoutLength(headers), body, signal });
    } catch (err) {
      if (signal?.aborted) throw abortError(signal);
      throw new TransportError(`PUT failed: ${String((err as Error)?.message ?? err)}`, { cause: err });
    }
    const text = await res.text().catch(() => "");
    if (res.ok) onProgress(body.size);
    return { status: res.status, etag: res.headers.get("ETag"), body: text };
  };
}

/** xhrPut PUTs with XMLHttpRequest, reporting progress as the bytes leave. */
export const xhrPut: Put = (url, headers, body, onProgress, signal) =>
  new Promise<PutAnswer>((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortError(signal));
      return;
    }
    const xhr = new XMLHttpRequest();
    const onAbort = () => xhr.abort();
    const done = () => signal?.removeEventListener("abort", onAbort);
    xhr.open("PUT", url, true);
    for (const [k, v] of Object.entries(withoutLength(headers))) xhr.setRequestHeader(k, v);
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) onProgress(e.loaded);
    });
    xhr.addEventListener("load", () => {
      done();
      if (xhr.status >= 200 && xhr.status < 300) onProgress(body.size);
      resolve({ status: xhr.status, etag: xhr.getResponseHeader("ETag"), body: xhr.responseText });
    });
    xhr.addEventListener("error", () => {
      done();
      reject(new TransportError("PUT failed: network error (or S3's CORS rule refused this page)"));
    });
    xhr.addEventListener("timeout", () => {
      done();
      reject(new TransportError("PUT timed out"));
    });
    xhr.addEventListener("abort", () => {
      done();
      reject(abortError(signal));
    });
    signal?.addEventListener("abort", onAbort, { once: true });
    xhr.send(body);
  });

/** isExpired tells a 403 of an expired presigned URL from other refusals. */
export function isExpired(answer: PutAnswer): boolean {
  return answer.status === 403 && /expired/i.test(answer.body);
}
