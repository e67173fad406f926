// The Mintgate Uppy plugin in a real Uppy (@uppy/core 6.x, and 5.x as
// "uppy-core-5") against a real mintgate stack, started by
// integration/jsclient_test.go as for stack.test.mjs (same environment:
// objects above 8 MiB go in parts of 5 MiB). Without it the tests skip.
import assert from "node:assert/strict";
import { createHmac, randomBytes, randomUUID } from "node:crypto";
import { appendFileSync } from "node:fs";
import { test } from "node:test";

import Uppy6 from "@uppy/core";
import Uppy5 from "uppy-core-5";

import { Client } from "../dist/index.js";
import { Mintgate, grantOf } from "../dist/uppy.js";

const base = process.env.MINTGATE_SIGNER_URL;
const skip = base ? false : "no stack: run through integration/jsclient_test.go (make test)";
const MiB = 1 << 20;

/** token is an HS256 JWT for a user of tenant "js", valid for ttl seconds (negative: expired). */
function token(user, ttl = 3600) {
  const b64 = (s) => Buffer.from(s).toString("base64url");
  const head = b64(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64(JSON.stringify({ sub: user, tenant_id: "js", exp: Math.floor(Date.now() / 1000) + ttl }));
  const sig = createHmac("sha256", process.env.MINTGATE_JWT_SECRET).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

function landed(key, size) {
  appendFileSync(process.env.MINTGATE_TEST_OBJECTS, `${JSON.stringify({ key, size })}\n`);
}

/** A file as a picker gives it: name, type, lastModified. */
function pick(name, size) {
  return new File([randomBytes(size)], name, { type: "application/pdf", lastModified: 1764590400000 });
}

/** A fetch that records what it sends; before may throw to fail a request. */
function recorder(before) {
  const sent = [];
  const f = async (url, init = {}) => {
    const r = { method: init.method ?? "GET", url: new URL(String(url)) };
    sent.push(r);
    if (before) await before(r, sent);
    return fetch(url, init);
  };
  return { fetch: f, sent };
}

const partPuts = (sent) => sent.filter((r) => r.method === "PUT" && r.url.searchParams.has("partNumber"));

/** newUppy makes an Uppy with the plugin and records its events. */
function newUppy(Uppy, opts, id = `t-${randomUUID()}`) {
  const uppy = new Uppy({ id });
  uppy.use(Mintgate, opts);
  const events = { progress: [], success: [], error: [] };
  uppy.on("upload-progress", (f, p) => events.progress.push({ id: f.id, ...p }));
  uppy.on("upload-success", (f, res) => events.success.push({ id: f.id, res }));
  uppy.on("upload-error", (f, err) => events.error.push({ id: f.id, err }));
  return { uppy, events };
}

async function completed(client, urlId) {
  return (await client.waitForStatus(urlId, { timeoutMs: 30000 })).status;
}

for (const [name, Uppy] of [["6.x", Uppy6], ["5.x", Uppy5]]) {
  test(`@uppy/core ${name}: a small file in one PUT and a large one in parts, with progress`, { skip }, async () => {
    const user = `user-${randomUUID()}`;
    const client = new Client({ baseUrl: base, token: token(user) });
    const { uppy, events } = newUppy(Uppy, { endpoint: base, getToken: () => token(user), concurrency: 2 });
    const small = uppy.addFile({ name: "small.pdf", type: "application/pdf", data: pick("small.pdf", MiB) });
    const large = uppy.addFile({ name: "large.pdf", type: "application/pdf", data: pick("large.pdf", 12 * MiB + 7) });
    const result = await uppy.upload();
    assert.equal(result.failed.length, 0, String(events.error[0]?.err));
    assert.equal(result.successful.length, 2);
    for (const [id, size, multipart] of [[small, MiB, false], [large, 12 * MiB + 7, true]]) {
      const f = uppy.getFile(id);
      assert.equal(f.progress.uploadComplete, true);
      const body = f.response.body;
      assert.equal(body.size, size);
      assert.equal(body.multipart, multipart);
      assert.equal(grantOf(f).urlId, body.urlId, "the file's state names its grant");
      assert.equal(Boolean(grantOf(f).grant), multipart);
      const seen = events.progress.filter((p) => p.id === id).map((p) => p.bytesUploaded);
      assert.ok(seen.length >= (multipart ? 3 : 1), `${seen.length} progress events`);
      assert.equal(seen.at(-1), size);
      assert.ok(seen.every((v, i) => i === 0 || v >= seen[i - 1]), "progress never goes back");
      assert.equal(await completed(client, body.urlId), "completed");
      landed(body.key, size);
    }
    assert.equal((await client.quota()).caller.limit - (await client.quota()).caller.remaining, 2, "two tokens for two files");
  });
}

test("a file removed mid-upload has its multipart grant aborted and its token stays spent", { skip }, async () => {
  const user = `user-${randomUUID()}`;
  const client = new Client({ baseUrl: base, token: token(user) });
  const start = (await client.quota()).caller.remaining;
  const { uppy, events } = newUppy(Uppy6, {
    endpoint: base,
    getToken: () => token(user),
    concurrency: 1,
    onProgress: (f, p) => p.part?.done && uppy.removeFile(f.id),
  });
  const id = uppy.addFile({ name: "gone.pdf", type: "application/pdf", data: pick("gone.pdf", 15 * MiB + 1) });
  let urlId;
  uppy.on("file-removed", (f) => (urlId = grantOf(f)?.urlId));
  await uppy.upload();
  assert.ok(urlId, "the file was removed after its grant existed");
  assert.equal(events.error.length, 0, "a removed file is no error");
  assert.equal(uppy.getFile(id), undefined);
  // The abort is sent as the upload stops; give it a moment to land.
  let status;
  for (let i = 0; i < 50 && status !== "aborted"; i++) {
    status = (await client.status(urlId)).status;
    if (status !== "aborted") await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.equal(status, "aborted");
  // A DELETE gives back the bytes, never the create's token.
  assert.equal((await client.quota()).caller.remaining, start - 1, "the create's token stays spent");
});

test("an upload stopped after two parts resumes in a new Uppy from the state Golden Retriever keeps", { skip }, async () => {
  const user = `user-${randomUUID()}`;
  let putsLeft = 2;
  const rec = recorder((r) => {
    if (r.method === "PUT" && putsLeft-- <= 0) throw new TypeError("offline (made by the test)");
  });
  const first = new Client({ baseUrl: base, token: token(user), fetch: rec.fetch, concurrency: 1, retries: 0 });
  // A reloaded page's Uppy has the same id (Golden Retriever's store is
  // named by it), so a file picked again has the same file id.
  const page = `page-${randomUUID()}`;
  const a = newUppy(Uppy6, { client: first }, page);
  const data = pick("resume.pdf", 20 * MiB);
  const id = a.uppy.addFile({ name: "resume.pdf", type: "application/pdf", data });
  const r1 = await a.uppy.upload();
  assert.equal(r1.failed.length, 1, "the first try fails once the network is gone");
  const kept = grantOf(a.uppy.getFile(id));
  assert.equal(kept.grant.partCount, 4);
  // What Golden Retriever restores after a reload: the file's state as it
  // was (JSON, no Blob) and the data again.
  const persisted = JSON.parse(JSON.stringify(a.uppy.getFile(id)));
  const rec2 = recorder();
  const b = newUppy(Uppy6, { client: new Client({ baseUrl: base, token: token(user), fetch: rec2.fetch }) }, page);
  const id2 = b.uppy.addFile({ name: "resume.pdf", type: "application/pdf", data });
  assert.equal(id2, id, "Uppy names the same file the same");
  b.uppy.setFileState(id2, { mintgate: persisted.mintgate });
  const r2 = await b.uppy.upload();
  assert.equal(r2.failed.length, 0, String(b.events.error[0]?.err));
  const body = b.uppy.getFile(id2).response.body;
  assert.equal(body.urlId, kept.urlId, "the same grant");
  assert.equal(partPuts(rec2.sent).length, 2, "only the two missing parts went up");
  assert.equal(rec2.sent.filter((r) => r.url.pathname === "/uploads/multipart").length, 0, "no second create");
  const q = await new Client({ baseUrl: base, token: token(user) }).quota();
  assert.equal(q.caller.limit - q.caller.remaining, 1, "one token for the file");
  assert.equal(await completed(first, body.urlId), "completed");
  landed(body.key, 20 * MiB);
});

test("a 401 asks getToken again and the upload goes on", { skip }, async () => {
  const user = `user-${randomUUID()}`;
  const given = [];
  const getToken = () => {
    const t = token(user, given.length === 0 ? -60 : 3600);
    given.push(t);
    return t;
  };
  const { uppy, events } = newUppy(Uppy6, { endpoint: base, getToken });
  uppy.addFile({ name: "auth.pdf", type: "application/pdf", data: pick("auth.pdf", 64 * 1024) });
  const r = await uppy.upload();
  assert.equal(r.failed.length, 0, String(events.error[0]?.err));
  assert.equal(given.length, 2, "getToken was called once, and again after the 401");
  const body = r.successful[0].response.body;
  landed(body.key, 64 * 1024);
});
