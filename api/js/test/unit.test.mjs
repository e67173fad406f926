// Unit tests of the parts that need no signer: Retry-After, backoff, the
// expiry of a presigned URL, and the Uppy options' choice of upload.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, expiryOf, newIdempotencyKey } from "../dist/index.js";
import { mintgateUppy } from "../dist/uppy.js";
import { backoffDelay, retryAfterSeconds } from "../dist/wait.js";

test("Retry-After reads delta-seconds and HTTP dates", () => {
  const now = Date.parse("2026-12-01T12:00:00Z");
  assert.equal(retryAfterSeconds("7", now), 7);
  assert.equal(retryAfterSeconds(" 0 ", now), 0);
  assert.equal(retryAfterSeconds("Tue, 01 Dec 2026 12:00:30 GMT", now), 30);
  assert.equal(retryAfterSeconds("soon", now), undefined);
  assert.equal(retryAfterSeconds(null, now), undefined);
});

test("backoff is full jitter under a doubling ceiling", () => {
  const b = { baseMs: 100, maxMs: 1000 };
  assert.equal(backoffDelay(0, b, () => 0.999), 99);
  assert.equal(backoffDelay(3, b, () => 0.5), 400);
  assert.equal(backoffDelay(20, b, () => 0.999), 999);
  assert.equal(backoffDelay(2, b, () => 0), 0);
});

test("a SigV4 URL's expiry is X-Amz-Date + X-Amz-Expires", () => {
  const u = "http://s3.local/b/k?X-Amz-Date=20261201T120000Z&X-Amz-Expires=120&X-Amz-Signature=ab";
  assert.equal(expiryOf(u, 1), Date.parse("2026-12-01T12:02:00Z"));
  assert.equal(expiryOf("http://s3.local/b/k", 42), 42);
});

test("idempotency keys are random version-4 UUIDs", () => {
  const re = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
  const a = newIdempotencyKey();
  assert.match(a, re);
  assert.notEqual(a, newIdempotencyKey());
});

test("the Uppy options pick multipart above the signer's limit, with its part size", () => {
  const limits = { maxObjectBytes: 100, maxMultipartBytes: 1000, partSize: 5 << 20, maxPartsPerRequest: 100, contentTypes: [] };
  const { options } = mintgateUppy(undefined, new Client({ fetch: async () => new Response("{}") }), limits);
  assert.equal(options.shouldUseMultipart({ id: "a", size: 100 }), false);
  assert.equal(options.shouldUseMultipart({ id: "b", size: 101 }), true);
  assert.equal(options.getChunkSize({ size: 1 << 30 }), 5 << 20);
});

test("a 429 is waited out for its Retry-After with the same Idempotency-Key", async () => {
  const keys = [];
  let calls = 0;
  const fake = async (_url, init) => {
    keys.push(new Headers(init.headers).get("Idempotency-Key"));
    if (calls++ === 0) {
      return new Response(JSON.stringify({ error: "too_many_signing_requests", message: "later", scope: "caller", retryAfter: 1 }), {
        status: 429,
        headers: { "Retry-After": "1", "Content-Type": "application/json" },
      });
    }
    return new Response(JSON.stringify({ urlId: "u" }), { status: 201 });
  };
  const waits = [];
  const c = new Client({ fetch: fake, tenant: "t", onWait: (w) => waits.push(w), random: () => 0 });
  const started = Date.now();
  const got = await c.sign({ contentType: "image/png", contentLength: 1 }, { idempotencyKey: "k-1" });
  assert.equal(got.urlId, "u");
  assert.deepEqual(keys, ["k-1", "k-1"]);
  assert.equal(waits.length, 1);
  assert.equal(waits[0].seconds, 1);
  assert.equal(waits[0].scope, "caller");
  assert.ok(Date.now() - started >= 1000, "retried before Retry-After");
});

test("traceparent: true sends one fresh sampled traceparent per sign, the same on its retries, and traceIdOf names its trace", async () => {
  const sent = [];
  let calls = 0;
  const fake = async (_url, init) => {
    sent.push(new Headers(init.headers).get("traceparent"));
    if (calls++ === 0) return new Response("{}", { status: 503, headers: { "Retry-After": "0" } });
    return new Response(JSON.stringify({ urlId: `u${calls}` }), { status: 201 });
  };
  const c = new Client({ fetch: fake, tenant: "t", traceparent: true });
  const a = await c.sign({ contentType: "image/png", contentLength: 1 }, { idempotencyKey: "k-1" });
  const b = await c.sign({ contentType: "image/png", contentLength: 1 }, { idempotencyKey: "k-2" });
  assert.equal(sent.length, 3);
  assert.match(sent[0], /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  assert.equal(sent[1], sent[0], "a retry sends the same traceparent");
  assert.notEqual(sent[2].split("-")[1], sent[0].split("-")[1], "each sign starts a trace of its own");
  assert.equal(c.traceIdOf(a.urlId), sent[0].split("-")[1]);
  assert.equal(c.traceIdOf(b.urlId), sent[2].split("-")[1]);

  const plain = [];
  const d = new Client({ fetch: async (_u, init) => (plain.push(new Headers(init.headers).get("traceparent")), new Response(JSON.stringify({ urlId: "v" }), { status: 201 })), tenant: "t" });
  await d.sign({ contentType: "image/png", contentLength: 1 }, { idempotencyKey: "k-3" });
  assert.deepEqual(plain, [null], "no traceparent by default");
  assert.equal(d.traceIdOf("v"), undefined);
});

test("an upload signs the file's SHA-256 by default, and a PUT S3 refuses as BadDigest fails as checksum_mismatch", async () => {
  const { createHash } = await import("node:crypto");
  const body = new Blob([new Uint8Array(1000).fill(7)], { type: "image/png" });
  const want = createHash("sha256").update(new Uint8Array(1000).fill(7)).digest("base64");
  const signed = [];
  const putHeaders = [];
  const fake = async (url, init = {}) => {
    const u = new URL(String(url));
    if (init.method === "PUT") {
      const h = new Headers(init.headers);
      putHeaders.push(h);
      if (!h.has("x-amz-checksum-sha256")) return new Response("", { status: 200 });
      return new Response("<Error><Code>BadDigest</Code><Message>The sha256 you specified did not match the calculated checksum.</Message></Error>", { status: 400 });
    }
    if (u.pathname === "/uploads/sign") {
      const req = JSON.parse(init.body);
      signed.push(req);
      const headers = { "Content-Length": "1000", "Content-Type": "image/png", "If-None-Match": "*" };
      if (req.checksumSHA256) headers["x-amz-checksum-sha256"] = req.checksumSHA256;
      return new Response(JSON.stringify({
        url: "http://s3.local/b/k?X-Amz-Date=20261201T120000Z&X-Amz-Expires=120", method: "PUT", headers,
        urlId: "u", key: "incoming/t/u", expiresAt: "2026-12-01T12:02:00Z", expiresIn: 120,
      }), { status: 201, headers: { "Content-Type": "application/json" } });
    }
    throw new Error(`unexpected ${init.method} ${u}`);
  };
  const c = new Client({ baseUrl: "http://signer.local", fetch: fake, tenant: "t", retries: 0 });
  await assert.rejects(c.upload(body, { multipart: false }), (err) => err.code === "checksum_mismatch" && err.status === 400);
  assert.equal(signed[0].checksumSHA256, want);
  assert.equal(putHeaders[0].get("x-amz-checksum-sha256"), want);

  signed.length = 0;
  const got = await c.upload(body, { multipart: false, checksum: false });
  assert.equal(got.urlId, "u");
  assert.equal(signed[0].checksumSHA256, undefined, "checksum: false sends none");
});

test("downloadUrl posts to the upload's download route and returns the presigned GET", async () => {
  const seen = [];
  const fake = async (url, init) => {
    seen.push({ url, method: init.method, key: new Headers(init.headers).get("Idempotency-Key") });
    return new Response(JSON.stringify({ url: "https://s3.example/x?X-Amz-Signature=s", method: "GET", expiresAt: "2026-12-04T17:05:00Z", expiresIn: 300 }), {
      status: 201,
      headers: { "Content-Type": "application/json" },
    });
  };
  const c = new Client({ fetch: fake, baseUrl: "https://signer.example", token: "t" });
  const got = await c.downloadUrl("0f8fad5b-d9cb-469f-a165-70867728950e", { idempotencyKey: "k-1" });
  assert.equal(got.method, "GET");
  assert.equal(got.expiresIn, 300);
  assert.deepEqual(seen, [{ url: "https://signer.example/uploads/0f8fad5b-d9cb-469f-a165-70867728950e/download", method: "POST", key: "k-1" }]);
});

test("downloadUrl of an upload still verifying is a MintgateError not_completed", async () => {
  const fake = async () =>
    new Response(JSON.stringify({ error: "not_completed", message: "this upload is verifying" }), { status: 409, headers: { "Content-Type": "application/json" } });
  const c = new Client({ fetch: fake, baseUrl: "https://signer.example", token: "t" });
  await assert.rejects(c.downloadUrl("0f8fad5b-d9cb-469f-a165-70867728950e"), (err) => err.code === "not_completed" && err.status === 409);
});
