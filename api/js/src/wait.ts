// Waiting: abortable sleeps, backoff with jitter, and the errors an
// aborted wait throws.

/** The error an aborted upload rejects with: the signal's reason, or a DOMException named AbortError. */
export function abortError(signal?: AbortSignal): unknown {
  if (signal?.reason !== undefined) return signal.reason;
  return new DOMException("The upload was aborted", "AbortError");
}

/** Throws the signal's abort error if it is aborted. */
export function throwIfAborted(signal?: AbortSignal): void {
  if (signal?.aborted) throw abortError(signal);
}

/** Resolves after ms milliseconds, or rejects with the abort error when signal aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortError(signal));
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** How long to wait before retry number attempt (0-based) of a failed request. */
export interface Backoff {
  /** The first delay's ceiling, in milliseconds (default 500). */
  baseMs?: number;
  /** No delay is longer (default 20000). */
  maxMs?: number;
}

/**
 * backoffDelay is "full jitter" exponential backoff: a uniformly random
 * delay below min(maxMs, baseMs × 2^attempt), so that many clients that
 * failed together do not retry together.
 */
export function backoffDelay(attempt: number, b: Backoff, random: () => number): number {
  const base = b.baseMs ?? 500;
  const max = b.maxMs ?? 20000;
  const ceiling = Math.min(max, base * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}

/**
 * retryAfterSeconds reads a Retry-After header: delta-seconds or an
 * HTTP date. It returns undefined when there is none or it does not parse.
 */
export function retryAfterSeconds(value: string | null, now: number): number | undefined {
  if (value == null || value.trim() === "") return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, Math.ceil((at - now) / 1000));
}
