// @mintgate/client: the browser and Node client of the mintgate signer.
// See README.md.

export type * from "./api.js";
export { Client, type ClientOptions, type Wait } from "./client.js";
export { MintgateError, newIdempotencyKey } from "./errors.js";
export { PartURLs, expiryOf } from "./parts.js";
export { type Put, type PutAnswer, TransportError, fetchPut, xhrPut } from "./put.js";
export { type Progress, type UploadOptions, type UploadResult, upload } from "./upload.js";
export type { Backoff } from "./wait.js";
