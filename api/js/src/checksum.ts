// SHA-256 checksums of what an upload sends, with WebCrypto: the signer
// signs them into the URLs so that S3 refuses any other bytes.

/** sha256Base64 is the standard base64 of body's SHA-256, as the signer's checksumSHA256 wants it. */
export async function sha256Base64(body: Blob): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", await body.arrayBuffer()));
  let bin = "";
  for (const b of digest) bin += String.fromCharCode(b);
  return btoa(bin);
}

/**
 * PartChecksums hashes the parts of one file, each once, when first asked
 * (get) or ahead of the uploads (prefetch, one part at a time, so only
 * one part is read for hashing at once). WebCrypto has no streaming
 * digest, so each part is read whole: at most a part's size of memory.
 */
export class PartChecksums {
  readonly #file: Blob;
  readonly #partSize: number;
  readonly #sums = new Map<number, Promise<string>>();
  readonly #known = new Map<number, string>();

  constructor(file: Blob, partSize: number) {
    this.#file = file;
    this.#partSize = partSize;
  }

  /** get is part n's checksum. */
  get(n: number): Promise<string> {
    let p = this.#sums.get(n);
    if (!p) {
      const start = (n - 1) * this.#partSize;
      p = sha256Base64(this.#file.slice(start, start + this.#partSize)).then((sum) => {
        this.#known.set(n, sum);
        return sum;
      });
      this.#sums.set(n, p);
      p.catch(() => this.#sums.delete(n));
    }
    return p;
  }

  /** known is part n's checksum if it is hashed already. */
  known(n: number): string | undefined {
    return this.#known.get(n);
  }

  /** prefetch hashes parts one after another, so that a batch of part URLs can name their checksums; it stops at the first failure or when signal aborts. */
  async prefetch(parts: number[], signal?: AbortSignal): Promise<void> {
    for (const n of parts) {
      if (signal?.aborted) return;
      await this.get(n);
    }
  }
}
