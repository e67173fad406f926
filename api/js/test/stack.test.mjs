// The client against a real mintgate stack (signer, completer, sweeper,
// Redis, NATS, versitygw, fauxqs), started by the Go test
// integration/jsclient_test.go, which passes it in the environment:
//   MINTGATE_SIGNER_URL   the signer's base URL
//   MINTGATE_JWT_SECRET   the signer's HS256 secret, to mint users' tokens
//   MINTGATE_ANON_TENANT  a tenant open to anonymous callers, 2 tokens, 1/s
//   MINTGATE_TEST_OBJECTS a file each test appends {key, size} lines to: the
//                         Go test checks S3 holds each object with that size
// The signer runs with MINTGATE_MAX_OBJECT_BYTES=8MiB, parts of 5 MiB and
// MINTGATE_URL_TTL=5s. Without MINTGATE_SIGNER_URL the tests skip.
import assert from "node:assert/strict";
import { createHmac, randomBytes, randomUUID } from "node:crypto";
import { appendFileSync } from "node:fs";
import { test } from "node:test";

import { Client, MintgateError } from "../dist/index.js";

const base = process.env.MINTGATE_SIGNER_URL;
const skip = base ? false : "no stack: run through integration/jsclient_test.go (make test)";
const MiB = 1 << 20;

function b64url(s) {
  return Buffer.from(s).toString("base64url");
}

/** token is an HS256 JWT for a user of a tenant, valid an hour. */
function token(tenant, user) {
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify({ sub: user, tenant_id: tenant, exp: Math.floor(Date.now() / 1000) + 3600 }));
  const sig = createHmac("sha256", process.env.MINTGATE_JWT_SECRET).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

/** A new user of tenant "js", with a bucket of its own. */
function userClient(opts = {}) {
  return new Client({ baseUrl: base, token: token("js", `user-${randomUUID()}`), random: () => 0.5, ...opts });
}

function file(size) {
  return new Blob([randomBytes(size)], { type: "application/pdf" });
}

function landed(key, size) {
  appendFileSync(process.env.MINTGATE_TEST_OBJECTS, `${JSON.stringify({ key, size })}\n`);
}

/** A fetch that records what it sends, and may change it (before). */
function recorder(before) {
  const sent = [];
  const f = async (url, init = {}) => {
    const u = new URL(String(url));
    const r = { method: init.method ?? "GET", url: u, headers: new Headers(init.headers) };
    sent.push(r);
    if (before) await before(r, sent);
    return fetch(url, init);
  };
  return { fetch: f, sent };
}

const puts = (sent, part) => sent.filter((r) => r.method === "PUT" && (part === undefined || r.url.searchParams.get("partNumber") === String(part)));

test("a small file goes up in one PUT and completes", { skip }, async () => {
  const rec = recorder();
  const c = userClient({ fetch: rec.fetch });
  const progress = [];
  const got = await c.upload(file(2 * MiB), { onProgress: (p) => progress.push(p.loaded) });
  assert.equal(got.multipart, false);
  assert.equal(got.size, 2 * MiB);
  assert.equal(puts(rec.sent).length, 1);
  assert.equal(progress.at(-1), 2 * MiB);
  const s = await c.waitForStatus(got.urlId, { timeoutMs: 30000 });
  assert.equal(s.status, "completed");
  landed(got.key, 2 * MiB);
});

test("a large file goes up in parts, signed in one batch, and completes", { skip }, async () => {
  const rec = recorder();
  const c = userClient({ fetch: rec.fetch, concurrency: 2 });
  const size = 12 * MiB + 12345;
  const parts = new Map();
  let grant;
  const got = await c.upload(file(size), {
    onGrant: (g) => (grant = g),
    onProgress: (p) => p.part && parts.set(p.part.partNumber, p.part),
  });
  assert.equal(got.multipart, true);
  assert.equal(got.size, size);
  assert.equal(grant.partCount, 3);
  assert.deepEqual([...parts.keys()].sort(), [1, 2, 3]);
  assert.ok([...parts.values()].every((p) => p.done && p.loaded === p.size));
  assert.equal(puts(rec.sent).length, 3);
  const signs = rec.sent.filter((r) => r.method === "POST" && r.url.pathname.endsWith("/parts"));
  assert.ok(signs.length <= 3, `${signs.length} POST /parts for 3 parts`);
  assert.equal(rec.sent.filter((r) => r.url.pathname.endsWith("/complete")).length, 1);
  const s = await c.waitForStatus(got.urlId, { timeoutMs: 30000 });
  assert.equal(s.status, "completed");
  landed(got.key, size);
});

test("a part whose PUT fails once is retried, and the upload completes", { skip }, async () => {
  // The network failure is made here (a fetch that throws, as fetch does
  // when a connection resets): S3 itself cannot be made to drop one PUT.
  let failed = false;
  const rec = recorder((r) => {
    if (r.method === "PUT" && r.url.searchParams.get("partNumber") === "2" && !failed) {
      failed = true;
      throw new TypeError("fetch failed: connection reset (made by the test)");
    }
  });
  const c = userClient({ fetch: rec.fetch, backoff: { baseMs: 50 } });
  const size = 11 * MiB;
  const got = await c.upload(file(size));
  assert.ok(failed);
  assert.equal(puts(rec.sent, 2).length, 2, "part 2 was sent twice");
  assert.equal(puts(rec.sent, 1).length, 1);
  assert.equal((await c.waitForStatus(got.urlId, { timeoutMs: 30000 })).status, "completed");
  landed(got.key, size);
});

test("an expired part URL is signed again, free, and the upload completes", { skip }, async () => {
  // Part 1's first PUT waits until its URL (MINTGATE_URL_TTL=5s) expired:
  // S3 refuses it for real, and the client asks the signer for a new URL.
  let held = false;
  const rec = recorder(async (r) => {
    if (r.method === "PUT" && r.url.searchParams.get("partNumber") === "1" && !held) {
      held = true;
      await new Promise((ok) => setTimeout(ok, 6500));
    }
  });
  const c = userClient({ fetch: rec.fetch, backoff: { baseMs: 50 } });
  const before = (await c.quota()).caller.remaining;
  const size = 9 * MiB;
  const got = await c.upload(file(size));
  const ones = puts(rec.sent, 1);
  assert.equal(ones.length, 2, "part 1 was sent twice");
  assert.notEqual(ones[0].url.href, ones[1].url.href, "with a new URL");
  assert.equal(before - (await c.quota()).caller.remaining, 1, "the upload spent one token, re-signing none");
  assert.equal((await c.waitForStatus(got.urlId, { timeoutMs: 30000 })).status, "completed");
  landed(got.key, size);
});

test("a 429 is waited out for its Retry-After, with the same Idempotency-Key", { skip }, async () => {
  const tenant = process.env.MINTGATE_ANON_TENANT;
  const rec = recorder();
  const waits = [];
  const c = new Client({ baseUrl: base, tenant, fetch: rec.fetch, onWait: (w) => waits.push(w) });
  // Spend the anonymous caller's bucket (2 tokens, 1 per second), with a
  // client that does not wait.
  const drain = new Client({ baseUrl: base, tenant, waits: 0 });
  for (;;) {
    try {
      await drain.sign({ contentType: "image/png", contentLength: 1 }, { idempotencyKey: randomUUID() });
    } catch (err) {
      assert.ok(err instanceof MintgateError);
      assert.equal(err.status, 429, String(err));
      break;
    }
  }
  const got = await c.upload(file(MiB), { contentType: "image/png" });
  assert.equal(got.multipart, false);
  const signs = rec.sent.filter((r) => r.url.pathname === "/uploads/sign");
  assert.ok(signs.length >= 2, "the first sign was refused");
  assert.equal(new Set(signs.map((r) => r.headers.get("Idempotency-Key"))).size, 1, "one Idempotency-Key for every try");
  assert.ok(waits.length >= 1 && waits.every((w) => w.status === 429 && w.seconds >= 1));
  assert.equal(waits[0].code, "too_many_signing_requests");
  assert.equal((await c.waitForStatus(got.urlId, { timeoutMs: 30000 })).status, "completed");
  landed(got.key, MiB);
});

test("an aborted multipart upload is aborted at the signer and its token stays spent", { skip }, async () => {
  const c = userClient();
  const start = (await c.quota()).caller.remaining;
  const ctl = new AbortController();
  let grant;
  const run = c.upload(file(15 * MiB + 1), {
    signal: ctl.signal,
    onGrant: (g) => (grant = g),
    onProgress: (p) => p.part?.done && ctl.abort(),
  });
  await assert.rejects(run, (err) => err.name === "AbortError");
  assert.ok(grant, "the grant was created");
  assert.equal((await c.status(grant.urlId)).status, "aborted");
  // A create is a create: a DELETE gives back the bytes, never the token
  // (aborting never multiplies creates).
  assert.equal((await c.quota()).caller.remaining, start - 1, "the create's token stays spent");
});

test("an upload left by a failure resumes from the parts S3 holds", { skip }, async () => {
  let putsLeft = 2;
  const rec = recorder((r) => {
    if (r.method === "PUT" && putsLeft-- <= 0) throw new TypeError("offline (made by the test)");
  });
  const c = userClient({ fetch: rec.fetch, concurrency: 1, retries: 0 });
  const f = file(16 * MiB);
  let grant;
  await assert.rejects(c.upload(f, { onGrant: (g) => (grant = g) }), (err) => err instanceof MintgateError && err.grant?.urlId === grant.urlId);
  putsLeft = Infinity;
  rec.sent.length = 0;
  const got = await c.upload(f, { resume: grant });
  assert.equal(got.urlId, grant.urlId);
  assert.equal(puts(rec.sent).length, 2, "only the two missing parts went up again");
  assert.equal((await c.waitForStatus(got.urlId, { timeoutMs: 30000 })).status, "completed");
  landed(got.key, 16 * MiB);
});

/** A fetch that PUTs other bytes (as many) than the client hashed and signed, for the PUTs swap picks. */
function swapper(swap) {
  const sent = [];
  const f = async (url, init = {}) => {
    const u = new URL(String(url));
    sent.push({ method: init.method ?? "GET", url: u, headers: new Headers(init.headers), body: init.body });
    if (init.method === "PUT" && swap(u)) {
      init = { ...init, body: new Blob([randomBytes(init.body.size)]) };
    }
    return fetch(url, init);
  };
  return { fetch: f, sent };
}

test("a PUT of other bytes than the checksum signed is refused by S3: the upload fails, never completes", { skip }, async () => {
  const rec = swapper(() => true);
  const c = userClient({ fetch: rec.fetch });
  let grant;
  await assert.rejects(c.upload(file(MiB), { onSign: (g) => (grant = g) }), (err) => err instanceof MintgateError && err.code === "checksum_mismatch");
  const sign = rec.sent.find((r) => r.url.pathname === "/uploads/sign");
  assert.ok(sign, "signed");
  assert.match(grant.headers["x-amz-checksum-sha256"], /^[A-Za-z0-9+/]{43}=$/);
  assert.match(grant.url, /X-Amz-SignedHeaders=[^&]*x-amz-checksum-sha256/);
  const put = rec.sent.find((r) => r.method === "PUT");
  assert.equal(put.headers.get("x-amz-checksum-sha256"), grant.headers["x-amz-checksum-sha256"]);
  const s = await c.status(grant.urlId);
  assert.notEqual(s.status, "completed");
  assert.notEqual(s.status, "verifying");
});

test("a part of other bytes than its checksum is refused: the multipart upload fails, the right parts complete", { skip }, async () => {
  let swapping = true;
  const swapped = swapper((u) => swapping && u.searchParams.get("partNumber") === "2");
  const c = userClient({ fetch: swapped.fetch, retries: 0 });
  const f = file(11 * MiB);
  let grant;
  await assert.rejects(c.upload(f, { onGrant: (g) => (grant = g) }), (err) => err instanceof MintgateError && err.code === "checksum_mismatch");
  assert.equal(grant.checksumAlgorithm, "SHA256");
  for (const p of await c.listParts(grant.urlId)) {
    assert.notEqual(p.partNumber, 2, "S3 holds no part of the other bytes");
    assert.match(p.checksumSHA256, /^[A-Za-z0-9+/]{43}=$/);
  }
  // The same file, its bytes unchanged, resumes on the same grant and completes.
  swapping = false;
  const got = await c.upload(f, { resume: grant });
  assert.equal(got.urlId, grant.urlId);
  assert.equal((await c.waitForStatus(got.urlId, { timeoutMs: 30000 })).status, "completed");
  landed(got.key, 11 * MiB);
});
