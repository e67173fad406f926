// @mintgate/client: the browser and Node client of the mintgate signer.
// See README.md.

import { Client as Calls } from "./client.js";
import { type UploadOptions, type UploadResult, upload } from "./upload.js";

export type * from "./api.js";
export { type ClientOptions, type Wait } from "./client.js";
export { MintgateError, newIdempotencyKey } from "./errors.js";
export { PartURLs, expiryOf } from "./parts.js";
export { type Put, type PutAnswer, TransportError, fetchPut, xhrPut } from "./put.js";
export { type Progress, type UploadOptions, type UploadResult, upload } from "./upload.js";
export type { Backoff } from "./wait.js";
export {
  type UploadCompletedData,
  type UploadRejectedData,
  type VerifyWebhookOptions,
  type WebhookEvent,
  type WebhookFailure,
  type WebhookHeaders,
  WebhookVerificationError,
  verifyWebhook,
} from "./webhook.js";

/**
 * Client calls the signer (every route, each call retried: client.ts) and
 * uploads files through it. It is composed here, not in client.ts, because
 * upload.ts builds on the calls: client.ts importing upload.ts would make
 * a circle.
 */
export class Client extends Calls {
  /**
   * upload sends file: a single presigned PUT up to the signer's
   * maxObjectBytes, a multipart upload above it (parts in parallel, each
   * retried, expired part URLs signed again for free). Aborting
   * opts.signal stops it, and aborts a multipart grant so its tokens come
   * back at once.
   */
  upload(file: Blob, opts: UploadOptions = {}): Promise<UploadResult> {
    return upload(this, file, opts);
  }
}
