// Uppy and mintgate: the Mintgate uploader plugin (plugin.ts) for
// @uppy/core 6.x, and for @uppy/aws-s3 5.x users the options that make it
// upload through mintgate (mintgateUppy, below). No import of Uppy: the
// shapes of its API we use are in uppyshapes.ts, one set for both, so the
// package keeps no runtime dependency.

export { Mintgate, type MintgateOptions, type MintgateResult, RejectedError } from "./plugin.js";
export { type FileGrant, type Grant, type MintgateFile, type UppyCore, type UppyFileLike, type UppyLike, grantOf } from "./uppyshapes.js";

import type { Limits, MultipartGrant, SignResponse } from "./api.js";
import type { Client } from "./client.js";
import { newIdempotencyKey } from "./errors.js";
import { PartURLs } from "./parts.js";
import { TransportError, isExpired, withoutLength } from "./put.js";
import { type Grant, type UppyFileLike, type UppyLike, grantOf } from "./uppyshapes.js";

/** What @uppy/aws-s3 5.x's getUploadParameters and signPart return. */
export interface AwsS3UploadParameters {
  method: "PUT";
  url: string;
  headers: Record<string, string>;
  expires?: number;
}

/** An S3 part as @uppy/aws-s3 5.x passes and takes them. */
export interface AwsS3Part {
  PartNumber?: number;
  Size?: number;
  ETag?: string;
}

interface MultipartRef {
  uploadId?: string | undefined;
  key: string;
  signal?: AbortSignal | undefined;
}

/** The options of @uppy/aws-s3 5.x that mintgate provides: spread them into uppy.use(AwsS3, {...}). */
export interface AwsS3Options {
  shouldUseMultipart: (file: UppyFileLike) => boolean;
  getChunkSize: (file: { size: number }) => number;
  getUploadParameters: (file: UppyFileLike, opts?: { signal?: AbortSignal }) => Promise<AwsS3UploadParameters>;
  createMultipartUpload: (file: UppyFileLike) => Promise<{ uploadId: string; key: string }>;
  signPart: (file: UppyFileLike, opts: MultipartRef & { partNumber: number }) => Promise<AwsS3UploadParameters>;
  listParts: (file: UppyFileLike, opts: MultipartRef) => Promise<AwsS3Part[]>;
  completeMultipartUpload: (file: UppyFileLike, opts: MultipartRef & { parts: AwsS3Part[] }) => Promise<{ location: string }>;
  abortMultipartUpload: (file: UppyFileLike, opts: MultipartRef) => Promise<void>;
  uploadPartBytes: (opts: PartBytes) => Promise<{ ETag: string; location?: string }>;
}

/** What @uppy/aws-s3 5.x passes its uploadPartBytes. */
export interface PartBytes {
  signature: { url: string; headers?: Record<string, string>; method?: string };
  body: Blob | FormData;
  size?: number;
  onProgress: (ev: { loaded: number; lengthComputable: boolean }) => void;
  onComplete: (etag: string) => void;
  signal?: AbortSignal;
}

/** One PUT's progress, for a page that shows each part. */
export interface PartProgress {
  fileId: string;
  /** 0 for a single PUT. */
  partNumber: number;
  loaded: number;
  size: number;
  state: "uploading" | "done" | "failed";
}

export interface MintgateUppyOptions {
  /** Told every PUT's progress (each part's, for multipart uploads). */
  onPart?: (p: PartProgress) => void;
}

/** The Uppy options plus what the page may want to read back. */
export interface MintgateUppy {
  /** Spread into uppy.use(AwsS3, {...options, limit: 4}). */
  options: AwsS3Options;
  /** The grant of an Uppy file (by id), once it has one: its urlId for GET /uploads/{urlId}. */
  grantOf(fileId: string): Grant | undefined;
}

function contentTypeOf(file: UppyFileLike): string {
  const data = file.data;
  return file.type || (data instanceof Blob ? data.type : "") || "application/octet-stream";
}

function sizeOf(file: UppyFileLike): number {
  const size = file.size ?? file.data?.size;
  if (size == null) throw new Error("mintgate: an upload needs the file's size");
  return size;
}

/**
 * mintgateUppy makes the options of @uppy/aws-s3 5.x that upload through
 * the client's signer: a single PUT up to limits.maxObjectBytes, multipart
 * with the signer's part size above it. Every Uppy file gets one
 * Idempotency-Key for all its retries (Uppy's retry button included) and a
 * new one only after it succeeded or was removed. The signer's 429s and
 * 503s are waited out inside the callbacks for as long as Retry-After says
 * (ClientOptions.onWait tells the page), so Uppy's own fixed retryDelays
 * apply only to the PUTs of parts.
 *
 *   const client = new Client({ tenant: "acme" });
 *   const limits = await client.limits();
 *   const mg = mintgateUppy(uppy, client, limits);
 *   uppy.use(AwsS3, { ...mg.options, limit: 4 });
 */
export function mintgateUppy(uppy: UppyLike | undefined, client: Client, limits: Limits, opts: MintgateUppyOptions = {}): MintgateUppy {
  const keys = new Map<string, string>();
  /** Which file a PUT is for: by its URL's uploadId, or the single PUT's URL. */
  const fileOfURL = new Map<string, string>();
  const grants = new Map<string, Grant>();
  const byKey = new Map<string, { grant: MultipartGrant; urls: PartURLs }>();
  const keyOf = (file: UppyFileLike) => {
    let k = keys.get(file.id);
    if (k === undefined) {
      k = newIdempotencyKey();
      keys.set(file.id, k);
    }
    return k;
  };
  const multipartOf = (file: UppyFileLike, ref: MultipartRef) => {
    const m = byKey.get(ref.key);
    if (m === undefined || m.grant.uploadId !== ref.uploadId) {
      // Uppy restored an upload this page did not start (Golden Retriever):
      // mintgate's grants are not resumable across page loads through Uppy.
      throw new Error(`mintgate: no grant of this page for ${file.id}'s upload`);
    }
    return m;
  };
  uppy?.on("upload-success", (file) => {
    if (file) keys.delete(file.id);
  });
  uppy?.on("file-removed", (file) => {
    if (file) keys.delete(file.id);
  });
  const options: AwsS3Options = {
    shouldUseMultipart: (file) => sizeOf(file) > limits.maxObjectBytes,
    getChunkSize: () => limits.partSize,
    async getUploadParameters(file, opts) {
      const signed: SignResponse = await client.sign(
        { contentType: contentTypeOf(file), contentLength: sizeOf(file) },
        { idempotencyKey: keyOf(file), ...(opts?.signal ? { signal: opts.signal } : {}) },
      );
      grants.set(file.id, { urlId: signed.urlId, key: signed.key, multipart: false });
      fileOfURL.set(signed.url, file.id);
      // No "expires": Uppy would make it the PUT's timeout, and S3 checks a
      // URL's expiry when a PUT starts, not while a slow one runs.
      return { method: "PUT", url: signed.url, headers: withoutLength(signed.headers) };
    },
    async createMultipartUpload(file) {
      const grant = await client.createMultipart(
        { contentType: contentTypeOf(file), contentLength: sizeOf(file) },
        { idempotencyKey: keyOf(file) },
      );
      if (grant.partSize !== limits.partSize) {
        // Uppy cut the file with limits.partSize before asking: a signer
        // whose part size changed since would refuse the parts.
        await client.abort(grant.urlId).catch(() => {});
        throw new Error(`mintgate: the signer's part size is now ${grant.partSize}, not ${limits.partSize}: reload the page`);
      }
      grants.set(file.id, { urlId: grant.urlId, key: grant.key, multipart: true, grant });
      fileOfURL.set(grant.uploadId, file.id);
      byKey.set(grant.key, { grant, urls: new PartURLs(client, grant, Math.min(limits.maxPartsPerRequest, 4 * client.concurrency)) });
      return { uploadId: grant.uploadId, key: grant.key };
    },
    async signPart(file, { uploadId, key, partNumber, signal }) {
      const { urls } = multipartOf(file, { uploadId, key });
      // Uppy asks again for a part whose PUT failed: sign it anew rather
      // than hand back a URL S3 may have refused as expired.
      const part = await urls.get(partNumber, signal);
      urls.forget(partNumber);
      return { method: "PUT", url: part.url, headers: withoutLength(part.headers) };
    },
    async listParts(file, ref) {
      const { grant } = multipartOf(file, ref);
      const parts = await client.listParts(grant.urlId, ref.signal ? { signal: ref.signal } : {});
      return parts.map((p) => ({ PartNumber: p.partNumber, Size: p.size, ETag: p.etag }));
    },
    async completeMultipartUpload(file, ref) {
      const { grant } = multipartOf(file, ref);
      const parts = ref.parts
        .map((p) => ({ partNumber: p.PartNumber ?? 0, etag: p.ETag ?? "" }))
        .sort((a, b) => a.partNumber - b.partNumber);
      const res = await client.complete(grant.urlId, parts, ref.signal ? { signal: ref.signal } : {});
      byKey.delete(grant.key);
      return { location: res.key };
    },
    async abortMultipartUpload(file, ref) {
      const m = byKey.get(ref.key);
      if (m === undefined) return;
      byKey.delete(ref.key);
      keys.delete(file.id);
      await client.abort(m.grant.urlId);
    },
    // The PUT itself, with the client's transport: it reports each part's
    // progress to onPart, and fails the way Uppy's retry logic reads
    // (error.source.status; "Request has expired" for an expired URL).
    async uploadPartBytes({ signature, body, size, onProgress, onComplete, signal }) {
      const blob = body as Blob;
      const total = size ?? blob.size;
      const q = new URL(signature.url).searchParams;
      const partNumber = Number(q.get("partNumber") ?? 0);
      const fileId = fileOfURL.get(q.get("uploadId") ?? signature.url) ?? "";
      const tell = (loaded: number, state: PartProgress["state"]) => opts.onPart?.({ fileId, partNumber, loaded, size: total, state });
      let answer;
      try {
        answer = await client.put(signature.url, signature.headers ?? {}, blob, (sent) => {
          onProgress({ loaded: sent, lengthComputable: true });
          tell(sent, "uploading");
        }, signal);
      } catch (err) {
        tell(0, "failed");
        if (err instanceof TransportError) throw Object.assign(new Error(err.message), { source: { status: 0 } });
        throw err;
      }
      // A 412 to a single PUT: the object is there already, and only this
      // URL could create its key: an earlier try landed, its answer lost.
      const landed = partNumber === 0 && answer.status === 412;
      if ((answer.status < 200 || answer.status >= 300) && !landed) {
        tell(0, "failed");
        const message = isExpired(answer) ? "Request has expired" : `S3 answered ${answer.status}`;
        throw Object.assign(new Error(message), { source: { status: answer.status } });
      }
      if (partNumber === 0) {
        fileOfURL.delete(signature.url);
        tell(total, "done");
        return { ETag: answer.etag ?? "", location: signature.url.split("?")[0]! };
      }
      if (!answer.etag) {
        throw new Error("S3 answered a part without an ETag this page can read: the bucket's CORS rule must expose ETag");
      }
      tell(total, "done");
      onComplete(answer.etag);
      return { ETag: answer.etag };
    },
  };
  return { options, grantOf: (id) => grantOf(id, grants) };
}
