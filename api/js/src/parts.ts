// Part URLs of one multipart grant, signed in batches and re-signed (free)
// before they expire.

import type { MultipartGrant, PartToSign, SignedPart, Signer } from "./api.js";
import type { PartChecksums } from "./checksum.js";

/** A signed part and when its URL stops working, on the signer's clock (ms). */
interface Entry {
  part: SignedPart;
  expires: number;
  /** How close to expires the URL is signed again before use: 15 s, or a quarter of a shorter life. */
  margin: number;
}

/**
 * expiryOf reads when a SigV4 presigned URL expires (X-Amz-Date +
 * X-Amz-Expires), in ms since the epoch; fallback when it cannot tell.
 */
export function expiryOf(url: string, fallback: number): number {
  try {
    const q = new URL(url).searchParams;
    const d = q.get("X-Amz-Date");
    const e = Number(q.get("X-Amz-Expires"));
    const m = d && /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(d);
    if (m && Number.isFinite(e)) {
      return Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!) + e * 1000;
    }
  } catch {
    // not a URL we can read: use the fallback
  }
  return fallback;
}

/**
 * PartURLs hands out a fresh presigned URL per part. Asked for part n, it
 * signs n and the next parts not yet signed in one POST (up to batch), so
 * an upload of many parts costs one signer request per batch, not per part.
 */
export class PartURLs {
  readonly #client: Pick<Signer, "serverNow" | "signParts">;
  readonly #grant: MultipartGrant;
  readonly #batch: number;
  readonly #entries = new Map<number, Entry>();
  readonly #pending = new Map<number, Promise<void>>();
  /** Parts that need no URL any more. */
  readonly #done = new Set<number>();
  /** A checksummed grant's parts' checksums: each part is signed with its own. */
  readonly #sums: PartChecksums | undefined;

  constructor(client: Pick<Signer, "serverNow" | "signParts">, grant: MultipartGrant, batch: number, checksums?: PartChecksums) {
    this.#client = client;
    this.#grant = grant;
    this.#batch = Math.max(1, batch);
    this.#sums = checksums;
  }

  /** markDone says part n is uploaded: no URL is signed for it again. */
  markDone(n: number): void {
    this.#done.add(n);
    this.#entries.delete(n);
  }

  /** forget drops part n's URL (S3 refused it): the next get signs it again. */
  forget(n: number): void {
    this.#entries.delete(n);
  }

  /** get returns a URL for part n that is good for a while yet (15 s, or a quarter of a shorter URL life). */
  async get(n: number, signal?: AbortSignal): Promise<SignedPart> {
    for (let tries = 0; ; tries++) {
      const e = this.#entries.get(n);
      if (e && e.expires - this.#client.serverNow() > e.margin) return e.part;
      const inflight = this.#pending.get(n);
      if (inflight && tries === 0) {
        await inflight;
        continue;
      }
      await this.#sign(n, signal);
      const got = this.#entries.get(n);
      if (got) return got.part;
      throw new Error(`mintgate: the signer did not sign part ${n}`);
    }
  }

  #sign(first: number, signal?: AbortSignal): Promise<void> {
    const now = this.#client.serverNow();
    const numbers = [first];
    for (let n = first + 1; n <= this.#grant.partCount && numbers.length < this.#batch; n++) {
      const e = this.#entries.get(n);
      if (this.#done.has(n) || this.#pending.has(n) || (e && e.expires - now > e.margin * 4)) continue;
      // A checksummed part joins the batch once it is hashed: the
      // signer signs each part with its checksum.
      if (this.#sums && this.#sums.known(n) === undefined) continue;
      numbers.push(n);
    }
    const p = this.#ask(numbers).then((ask) => this.#client.signParts(this.#grant.urlId, ask, { signal })).then((parts) => {
      const now = this.#client.serverNow();
      for (const part of parts) {
        const expires = expiryOf(part.url, now + 60_000);
        this.#entries.set(part.partNumber, { part, expires, margin: Math.min(15_000, (expires - now) / 4) });
      }
    });
    const settled = p.finally(() => {
      for (const n of numbers) if (this.#pending.get(n) === settled) this.#pending.delete(n);
    });
    settled.catch(() => {});
    for (const n of numbers) this.#pending.set(n, settled);
    return settled;
  }

  /** ask is what to sign of numbers: the numbers, or each with its checksum. */
  async #ask(numbers: number[]): Promise<(number | PartToSign)[]> {
    const sums = this.#sums;
    if (!sums) return numbers;
    return Promise.all(numbers.map(async (n) => ({ partNumber: n, checksumSHA256: await sums.get(n) })));
  }
}
