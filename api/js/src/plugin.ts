// Mintgate: an Uppy uploader plugin (@uppy/core 6.x, and 5.x, whose
// plugin API is the same) that uploads each file with the client. No
// import of Uppy: a plugin is a class Uppy instantiates with itself, and
// the few calls we make of it are typed below, so the package keeps no
// runtime dependency (@uppy/core is a peer).

import type { StatusResponse } from "./api.js";
import { type Wait } from "./client.js";
import { Client } from "./index.js";
import { MintgateError, newIdempotencyKey } from "./errors.js";
import type { Progress, UploadResult } from "./upload.js";
import type { FileGrant, MintgateFile, UppyCore } from "./uppyshapes.js";

export interface MintgateOptions {
  /** The plugin's id (default "Mintgate"). */
  id?: string;
  /** The signer's origin and path prefix, e.g. "https://example.com/api"; "" (default) for the page's own origin. */
  endpoint?: string;
  /** The caller's bearer token (JWT). Called once and kept; called again when the signer answers 401. */
  getToken?: () => string | Promise<string>;
  /** For anonymous callers: the tenant, sent as X-Tenant-ID. */
  tenant?: string | (() => string);
  /** A client of the page's own (endpoint, getToken, tenant, onWait are then its business). */
  client?: Client;
  /** How many files go up at once (default 3); each multipart file sends its parts in parallel too. */
  limit?: number;
  /** How many parts of one file go up at once (default 4). */
  concurrency?: number;
  /**
   * "sha256" (the default): SHA-256 checksums of every object and part,
   * computed in the page (WebCrypto) and signed by the signer, so S3
   * refuses other bytes (the file fails with "checksum_mismatch"). false
   * turns them off (a signer that requires them answers 400
   * "checksum_required").
   */
  checksum?: "sha256" | false;
  /** Told every wait of a Retry-After or backoff, e.g. for a countdown. */
  onWait?: (wait: Wait) => void;
  /** Told every progress of every file, with each part's own (Progress.part). */
  onProgress?: (file: MintgateFile, progress: Progress) => void;
  /**
   * true (the default): a file's upload-success comes only once mintgate's
   * verdict is completed; between the bytes' arrival and the verdict the
   * file is in Uppy's post-processing stage (postprocess-progress,
   * "Verifying…"), and a rejected verdict is the file's upload-error,
   * naming the reason. false: upload-success as soon as S3 holds the
   * bytes, before any verdict.
   */
  waitForVerdict?: boolean;
  /** How long to wait for a verdict (default 300000 ms); then the file fails with "verdict_timeout". */
  verdictTimeoutMs?: number;
  /** The post-processing message while mintgate verifies (default "Verifying…"). */
  verifyingMessage?: string;
}

/**
 * The body of Uppy's upload-success response (file.response.body): the
 * upload, and with waitForVerdict its final status ("completed") and, when
 * the grant was bound to one, the SHA-256 (base64) S3 checked.
 */
export type MintgateResult = UploadResult & { status?: "completed"; checksumSHA256?: string };

/**
 * RejectedError is the upload-error of a file mintgate rejected: its code
 * and reason are the verdict's reason (type_mismatch, size_mismatch,
 * image_too_large, malware, scan_limit, encoding_not_allowed), its message
 * names it. The object lies in quarantine/; a retry gets the same verdict.
 */
export class RejectedError extends MintgateError {
  readonly reason: string;
  constructor(reason: string) {
    super(0, reason, `mintgate rejected the upload: ${reason}${explain(reason)}`);
    this.name = "RejectedError";
    this.reason = reason;
  }
}

function identity(file: MintgateFile, data: Blob): FileGrant["file"] {
  const lm = (data as Partial<File>).lastModified ?? (file.meta?.["lastModified"] as number | undefined);
  return { name: file.name ?? "", size: data.size, lastModified: lm };
}

function sameFile(a: FileGrant["file"], b: FileGrant["file"]): boolean {
  return a.name === b.name && a.size === b.size && (a.lastModified === undefined || b.lastModified === undefined || a.lastModified === b.lastModified);
}

/**
 * Mintgate is an Uppy uploader: uppy.use(Mintgate, {endpoint, getToken}).
 * Each file goes up with the client (a single PUT or a multipart upload,
 * by the signer's limits), its progress reported with upload-progress and
 * its end with upload-success or upload-error, as Uppy's own uploaders do.
 * A file removed (or cancel-all) mid-upload has its multipart grant
 * aborted, which gives its tokens back at once. Retrying a failed file, or
 * resuming one Golden Retriever restored, reuses its Idempotency-Key and
 * its multipart grant: only the parts S3 lacks go up again.
 */
export class Mintgate {
  /** Uppy logs it when the plugin is used. */
  static VERSION = "0.2.0";
  /** The Uppy this plugin is installed in (typed loosely so that Uppy 5's and 6's own types both accept the class). */
  readonly uppy: any;
  readonly #uppy: UppyCore;
  readonly opts: MintgateOptions;
  readonly id: string;
  readonly type = "uploader";
  readonly client: Client;
  /** Uppy's BasePlugin fields a plugin is expected to have; this one has no user interface to translate. */
  defaultLocale = { strings: {} };
  i18n = (key: string): string => key;
  i18nArray = (key: string): unknown[] => [key];
  VERSION = Mintgate.VERSION;
  #token: Promise<string> | undefined;
  #running = 0;
  readonly #queue: (() => void)[] = [];

  constructor(uppy: any, opts: MintgateOptions = {}) {
    this.uppy = uppy;
    this.#uppy = uppy as UppyCore;
    this.opts = opts;
    this.id = opts.id ?? "Mintgate";
    this.client = opts.client ?? new Client({
      baseUrl: opts.endpoint ?? "",
      ...(opts.getToken ? { token: () => this.#getToken(), onUnauthorized: () => void (this.#token = undefined) } : {}),
      ...(opts.tenant !== undefined ? { tenant: opts.tenant } : {}),
      ...(opts.onWait ? { onWait: opts.onWait } : {}),
      ...(opts.concurrency !== undefined ? { concurrency: opts.concurrency } : {}),
    });
  }

  #getToken(): Promise<string> {
    if (this.#token === undefined) {
      const p = Promise.resolve().then(() => this.opts.getToken!());
      this.#token = p;
      p.catch(() => {
        if (this.#token === p) this.#token = undefined;
      });
    }
    return this.#token;
  }

  install(): void {
    this.#uppy.addUploader(this.#handleUpload);
  }

  uninstall(): void {
    this.#uppy.removeUploader(this.#handleUpload);
  }

  // The rest of Uppy's plugin interface (BasePlugin), for a plugin with no state and no UI.
  getPluginState(): Record<string, unknown> {
    return (this.#uppy.getState().plugins?.[this.id] as Record<string, unknown>) ?? {};
  }

  setPluginState(update?: Record<string, unknown>): void {
    const plugins = this.#uppy.getState().plugins ?? {};
    this.#uppy.setState({ plugins: { ...plugins, [this.id]: { ...(plugins[this.id] as object), ...update } } });
  }

  setOptions(o: Partial<MintgateOptions>): void {
    Object.assign(this.opts, o);
  }

  i18nInit(): void {}
  update(): void {}
  afterUpdate(): void {}
  addTarget(): null {
    return null;
  }

  #handleUpload = async (fileIDs: string[]): Promise<void> => {
    // As Uppy's own uploaders: a file that failed waits for its retry, a
    // file done (restored by Golden Retriever) is not sent again, and a
    // restored file that had started does not start again. A file
    // restored while it waited for its verdict (uploadComplete, no
    // upload-success yet) waits again.
    const files = fileIDs
      .map((id) => this.#uppy.getFile(id))
      .filter((f): f is MintgateFile => f != null && !f.error && (!f.progress?.uploadComplete || awaitingVerdict(f)));
    if (files.length === 0) return;
    this.#uppy.emit("upload-start", files.filter((f) => !f.progress?.uploadStarted || !f.isRestored));
    await Promise.allSettled(files.map((f) => this.#uploadFile(f.id)));
  };

  async #limited<T>(fn: () => Promise<T>): Promise<T> {
    const limit = Math.max(1, this.opts.limit ?? 3);
    if (this.#running >= limit) await new Promise<void>((ok) => this.#queue.push(ok));
    this.#running++;
    try {
      return await fn();
    } finally {
      this.#running--;
      this.#queue.shift()?.();
    }
  }

  #save(id: string, grant: FileGrant): void {
    if (this.#uppy.getFile(id)) this.#uppy.setFileState(id, { mintgate: grant });
  }

  async #uploadFile(id: string): Promise<void> {
    const file = this.#uppy.getFile(id);
    if (!file) return;
    const controller = new AbortController();
    const onRemoved = (f?: MintgateFile) => f?.id === id && controller.abort();
    const onCancelAll = () => controller.abort();
    this.#uppy.on("file-removed", onRemoved);
    this.#uppy.on("cancel-all", onCancelAll);
    try {
      const data = file.data;
      if (file.isRemote || !(data instanceof Blob)) {
        throw new Error("mintgate: only local files can be uploaded (no data for this file; pick it again)");
      }
      // Only the bytes take one of the limit's places: a file waiting for
      // its verdict lets the next one go up.
      const result = await this.#limited(() => this.#bytes(file, data, controller.signal));
      const body = this.opts.waitForVerdict === false ? result : await this.#verdict(id, result, controller.signal);
      const done = this.#uppy.getFile(id);
      if (done) this.#uppy.emit("upload-success", done, { status: 200, body, uploadURL: undefined });
    } catch (err) {
      if (controller.signal.aborted) return; // removed or cancelled: nothing to report
      this.#uppy.log(err, "error");
      const f = this.#uppy.getFile(id);
      if (f) this.#uppy.emit("upload-error", f, err instanceof Error ? err : new Error(String(err)));
    } finally {
      this.#uppy.off("file-removed", onRemoved);
      this.#uppy.off("cancel-all", onCancelAll);
    }
  }

  /**
   * bytes sends the file's bytes, or, for a file whose bytes went up
   * before (a resume Golden Retriever restored while it was verifying),
   * sends nothing and answers what they were. It records the bytes' arrival
   * in the file's state before it answers.
   */
  async #bytes(file: MintgateFile, data: Blob, signal: AbortSignal): Promise<UploadResult> {
    const kept = this.#uppy.getFile(file.id)?.mintgate;
    if (kept?.uploaded && kept.urlId && kept.key && sameFile(kept.file, identity(file, data))) {
      this.#uppy.log(`[Mintgate] the bytes of ${file.id} are up: waiting for the verdict of ${kept.urlId}`);
      return { urlId: kept.urlId, key: kept.key, size: kept.uploaded.size, multipart: kept.uploaded.multipart };
    }
    const result = await this.#upload(file, data, signal);
    const now = this.#uppy.getFile(file.id)?.mintgate;
    if (now) this.#save(file.id, { ...now, urlId: result.urlId, key: result.key, uploaded: { size: result.size, multipart: result.multipart } });
    return result;
  }

  /**
   * verdict waits for mintgate's verdict on an upload whose bytes are up,
   * the file in Uppy's post-processing stage meanwhile: completed answers
   * upload-success's body; any other verdict (rejected, or a grant that
   * ended unused) throws, naming it, so the file gets upload-error and
   * never upload-success. The wait is the client's long poll; a signer
   * restarted mid-wait is asked again.
   */
  async #verdict(id: string, result: UploadResult, signal: AbortSignal): Promise<MintgateResult> {
    // Uppy's Dashboard (its status bar) shows "Uploading" for as long as a
    // file is not uploadComplete, whatever its post-processing says: the
    // bytes are up, so the file is, without upload-success (which would
    // tell the page's handlers it succeeded).
    const progress = { mode: "indeterminate", message: this.opts.verifyingMessage ?? "Verifying…" };
    const f = this.#uppy.getFile(id);
    if (f) {
      this.#uppy.setFileState(id, { progress: { ...f.progress, uploadComplete: true, postprocess: progress } });
      this.#uppy.emit("postprocess-progress", this.#uppy.getFile(id), progress);
    }
    let v: StatusResponse | undefined;
    try {
      v = await this.client.waitForVerdict(result.urlId, { signal, timeoutMs: this.opts.verdictTimeoutMs ?? 300000 });
    } finally {
      // Out of the post-processing stage, without Uppy's
      // postprocess-complete, which would mark a failed file complete;
      // and, but for a completed verdict, not uploaded (a retry waits
      // for the verdict again, sending nothing).
      const now = this.#uppy.getFile(id);
      if (now?.progress) {
        this.#uppy.setFileState(id, { progress: { ...now.progress, postprocess: undefined, uploadComplete: v?.status === "completed" } });
      }
    }
    switch (v.status) {
      case "completed":
        return { ...result, status: "completed", ...(v.checksumSHA256 ? { checksumSHA256: v.checksumSHA256 } : {}) };
      case "rejected":
        throw new RejectedError(v.reason ?? "rejected");
      case "pending":
      case "verifying":
        throw new MintgateError(0, "verdict_timeout", `mintgate: no verdict yet (${v.status}); the upload may still complete`);
      default:
        throw new MintgateError(0, v.status, `mintgate: the upload ended ${v.status} without an object`);
    }
  }

  /**
   * upload sends one file, resuming the grant its state holds when it is
   * for this same file. A grant that ended meanwhile (410: expired,
   * aborted or swept; 404) is dropped and the file signed anew, which
   * spends a token: the old one was given back.
   */
  async #upload(file: MintgateFile, data: Blob, signal: AbortSignal): Promise<UploadResult> {
    const me = identity(file, data);
    const kept = file.mintgate;
    let state: FileGrant = kept && sameFile(kept.file, me) ? kept : { idempotencyKey: newIdempotencyKey(), file: me };
    this.#save(file.id, state);
    const attempt = (s: FileGrant) =>
      this.client.upload(data, {
        contentType: file.type || data.type || "application/octet-stream",
        ...(file.name ? { filename: file.name } : {}),
        signal,
        checksum: this.opts.checksum ?? "sha256",
        idempotencyKey: s.idempotencyKey,
        ...(s.grant ? { resume: s.grant } : {}),
        onSign: (g) => this.#save(file.id, (state = { ...s, urlId: g.urlId, key: g.key, multipart: false })),
        onGrant: (g) => this.#save(file.id, (state = { ...s, urlId: g.urlId, key: g.key, multipart: true, grant: g })),
        onProgress: (p) => this.#progress(file.id, p),
      });
    try {
      return await attempt(state);
    } catch (err) {
      const ended = err instanceof MintgateError && (err.status === 410 || err.status === 404);
      if (!state.grant || !ended || signal.aborted) throw err;
      this.#uppy.log(`[Mintgate] the grant of ${file.id} ended (${(err as MintgateError).code}): signing anew`);
      state = { idempotencyKey: newIdempotencyKey(), file: me };
      this.#save(file.id, state);
      return attempt(state);
    }
  }

  #progress(id: string, p: Progress): void {
    const f = this.#uppy.getFile(id);
    if (!f) return;
    this.#uppy.emit("upload-progress", f, {
      uploadStarted: f.progress?.uploadStarted ?? Date.now(),
      bytesUploaded: p.loaded,
      bytesTotal: p.total,
    });
    this.opts.onProgress?.(f, p);
  }
}

/** awaitingVerdict: the file's bytes are up and no upload-success was emitted for it. */
function awaitingVerdict(f: MintgateFile): boolean {
  return !!f.mintgate?.uploaded && !(f as { response?: unknown }).response;
}

/** explain says what a rejection's reason means, for the user. */
function explain(reason: string | undefined): string {
  switch (reason) {
    case "type_mismatch":
      return " (the file's content is not the type its name or type says)";
    case "size_mismatch":
      return " (the file's size is not the size that was signed)";
    case "image_too_large":
      return " (the image has too many pixels)";
    case "malware":
      return " (a virus scanner found a signature)";
    case "scan_limit":
      return " (the virus scanner could not read it to its end)";
    case "encoding_not_allowed":
      return " (it was stored with a content encoding)";
    default:
      return "";
  }
}
