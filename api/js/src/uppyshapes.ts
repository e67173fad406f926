// The shapes of Uppy that mintgate uses, one set for the Mintgate plugin
// (plugin.ts, @uppy/core 5.x and 6.x) and the @uppy/aws-s3 5.x adapter
// (uppy.ts), and what each knows of a file's grant (grantOf). No import
// of Uppy: these are the parts of its API we use, so the package keeps no
// runtime dependency.

import type { MultipartGrant } from "./api.js";

/** What mintgate knows of one file's grant once the signer answered. */
export interface Grant {
  urlId: string;
  key: string;
  multipart: boolean;
  /** The multipart grant, for multipart uploads: to resume from the parts S3 holds. */
  grant?: MultipartGrant;
}

/**
 * What the plugin keeps in an Uppy file's state (file.mintgate), set with
 * setFileState as soon as it is known, so that Golden Retriever persists
 * it: a page reloaded mid-upload resumes the same grant with the same
 * Idempotency-Key, and spends no second token. The Grant's fields are
 * known once the signer answered.
 */
export interface FileGrant extends Partial<Grant> {
  /** The Idempotency-Key of the sign or create: every try of this file sends it. */
  idempotencyKey: string;
  /** The file it was made for: a resume checks the file is still that one. */
  file: { name: string; size: number; lastModified: number | undefined };
  /**
   * The bytes are up (the PUT or the complete answered): a resume only
   * waits for the verdict, sending nothing again.
   */
  uploaded?: { size: number; multipart: boolean };
}

/** The fields of an Uppy file the plugin and the adapter read. */
export interface MintgateFile {
  id: string;
  name?: string;
  type?: string;
  size: number | null;
  /** A Blob for local files (Uppy's remote files have only a size). */
  data?: Blob | { size: number | null };
  isRemote?: boolean;
  isRestored?: boolean;
  error?: string | null;
  progress?: { uploadStarted?: number | null; uploadComplete?: boolean };
  meta?: Record<string, unknown>;
  mintgate?: FileGrant;
}

/** The Uppy file the adapter reads: the same shape as the plugin's. */
export type UppyFileLike = MintgateFile;

/** The part of an Uppy instance the adapter listens to. */
export interface UppyLike {
  on(event: "upload-success" | "file-removed" | "cancel-all", cb: (file?: MintgateFile) => void): unknown;
}

/** The part of an Uppy instance (@uppy/core 5.x or 6.x) the plugin calls. */
export interface UppyCore extends UppyLike {
  addUploader(fn: (fileIDs: string[], uploadID: string) => Promise<unknown>): void;
  removeUploader(fn: (fileIDs: string[], uploadID: string) => Promise<unknown>): unknown;
  getFile(id: string): MintgateFile | undefined;
  setFileState(id: string, state: Record<string, unknown>): void;
  getState(): { plugins?: Record<string, unknown> } & Record<string, unknown>;
  setState(patch: Record<string, unknown>): void;
  emit(event: string, ...args: unknown[]): void;
  on(event: string, fn: (...args: any[]) => void): unknown;
  off(event: string, fn: (...args: any[]) => void): unknown;
  log(msg: unknown, type?: string): void;
}

/**
 * grantOf reads what mintgate knows of a file: from an Uppy file, what the
 * plugin keeps in its state (its urlId once signed); from a file's id, with
 * the adapter's grants (mintgateUppy's own grantOf), its Grant.
 */
export function grantOf(file: MintgateFile | undefined): FileGrant | undefined;
export function grantOf(fileId: string, grants: ReadonlyMap<string, Grant>): Grant | undefined;
export function grantOf(file: MintgateFile | string | undefined, grants?: ReadonlyMap<string, Grant>): FileGrant | Grant | undefined {
  return typeof file === "string" ? grants?.get(file) : file?.mintgate;
}
