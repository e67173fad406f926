// One multipart upload through a signer that integration/jsclient_test.go
// SIGKILLs and restarts twice: when part 1 is up (the client is then
// signing and PUTting the next parts) and when the last part is up (the
// complete is then on its way, answered or not). The client must finish
// the upload with the grant it has: the calls it retries are free (part
// URLs), idempotent (the complete) or replayed by their Idempotency-Key.
// It prints a "kill" line at each of the two points (the test kills and
// restarts the signer while the upload goes on), then one "result {json}"
// line. Environment: MINTGATE_SIGNER_URL,
// MINTGATE_TOKEN, MINTGATE_SIZE (bytes).
import { randomBytes } from "node:crypto";
import { Client } from "../dist/index.js";

const size = Number(process.env.MINTGATE_SIZE);
const client = new Client({
  baseUrl: process.env.MINTGATE_SIGNER_URL,
  token: process.env.MINTGATE_TOKEN,
  concurrency: 1,
  retries: 8,
  backoff: { baseMs: 200, maxMs: 2000 },
  onWait: (w) => console.log(`wait ${w.route} ${w.code} ${w.seconds}s`),
});
const file = new Blob([randomBytes(size)], { type: "application/pdf" });
let grant;
const got = await client.upload(file, {
  onGrant: (g) => (grant = g),
  onProgress: (p) => {
    if (p.part?.done && (p.part.partNumber === 1 || p.part.partNumber === grant.partCount)) {
      console.log(`kill after part ${p.part.partNumber}`);
    }
  },
});
console.log(`result ${JSON.stringify({ ...got, partCount: grant.partCount })}`);
process.exit(0);
