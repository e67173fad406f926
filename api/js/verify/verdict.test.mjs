// The Mintgate plugin waits for mintgate's verdict (issue 37), in a real
// Uppy (@uppy/core 6.x, and 5.x as "uppy-core-5") against a real stack
// whose completer verifies content: integration/jsclient_test.go's
// TestJSClientVerdict sets MINTGATE_VERDICT_STACK (it is not under test/,
// which runs on a stack with the content checks off). Without it the tests
// skip (the other stack runs with the content checks off).
import assert from "node:assert/strict";
import { createHmac, randomUUID } from "node:crypto";
import { deflateSync } from "node:zlib";
import { test } from "node:test";

import Uppy6 from "@uppy/core";
import Uppy5 from "uppy-core-5";

import { Mintgate } from "../dist/uppy.js";

const base = process.env.MINTGATE_SIGNER_URL;
const skip = base && process.env.MINTGATE_VERDICT_STACK ? false : "no verifying stack: run through integration/jsclient_test.go (TestJSClientVerdict)";

function token(user) {
  const b64 = (s) => Buffer.from(s).toString("base64url");
  const head = b64(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64(JSON.stringify({ sub: user, tenant_id: "js", exp: Math.floor(Date.now() / 1000) + 3600 }));
  const sig = createHmac("sha256", process.env.MINTGATE_JWT_SECRET).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, "ascii"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
/** realPNG is a decodable w×h RGB PNG. */
function realPNG(w, h) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const rows = Buffer.alloc(h * (1 + 3 * w), 0x7f);
  for (let y = 0; y < h; y++) rows[y * (1 + 3 * w)] = 0; // filter none
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", ihdr),
    chunk("IDAT", deflateSync(rows)),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

function newUppy(Uppy, user) {
  const uppy = new Uppy({ id: `v-${randomUUID()}` });
  uppy.use(Mintgate, { endpoint: base, getToken: () => token(user) });
  const order = [];
  const events = { post: [], success: [], error: [] };
  uppy.on("postprocess-progress", (f, p) => {
    events.post.push({ id: f.id, p });
    order.push(`postprocess-progress ${f.name}`);
  });
  uppy.on("upload-success", (f, res) => {
    events.success.push({ id: f.id, res });
    order.push(`upload-success ${f.name}`);
  });
  uppy.on("upload-error", (f, err) => {
    events.error.push({ id: f.id, err });
    order.push(`upload-error ${f.name}`);
  });
  return { uppy, events, order };
}

for (const [name, Uppy] of [["6.x", Uppy6], ["5.x", Uppy5]]) {
  test(`@uppy/core ${name}: a real PNG is verified, then upload-success says completed`, { skip }, async () => {
    const { uppy, events, order } = newUppy(Uppy, `user-${randomUUID()}`);
    const data = new File([realPNG(16, 16)], "real.png", { type: "image/png" });
    const id = uppy.addFile({ name: "real.png", type: "image/png", data });
    const result = await uppy.upload();
    assert.equal(result.failed.length, 0, String(events.error[0]?.err));
    assert.deepEqual(order, ["postprocess-progress real.png", "upload-success real.png"]);
    assert.equal(events.post[0].p.mode, "indeterminate");
    assert.equal(events.post[0].p.message, "Verifying…");
    const body = events.success[0].res.body;
    assert.equal(body.status, "completed");
    assert.match(body.checksumSHA256, /^[A-Za-z0-9+/]{43}=$/, "the grant was bound to the file's SHA-256");
    const f = uppy.getFile(id);
    assert.equal(f.progress.uploadComplete, true);
    assert.equal(f.progress.postprocess, undefined, "out of post-processing");
    assert.equal(f.response.body.status, "completed");
  });

  test(`@uppy/core ${name}: HTML named x.png is upload-error type_mismatch, never upload-success`, { skip }, async () => {
    const { uppy, events, order } = newUppy(Uppy, `user-${randomUUID()}`);
    const data = new File(["<!doctype html><html><body><script>alert(1)</script></body></html>\n"], "x.png", { type: "image/png" });
    const id = uppy.addFile({ name: "x.png", type: "image/png", data });
    const result = await uppy.upload();
    assert.equal(result.successful.length, 0);
    assert.equal(result.failed.length, 1);
    assert.deepEqual(order, ["postprocess-progress x.png", "upload-error x.png"]);
    assert.equal(events.success.length, 0, "no upload-success for a rejected file");
    const err = events.error[0].err;
    assert.equal(err.code, "type_mismatch");
    assert.equal(err.name, "RejectedError");
    assert.equal(err.reason, "type_mismatch");
    assert.match(err.message, /type_mismatch/);
    const f = uppy.getFile(id);
    assert.match(f.error, /type_mismatch/);
    assert.notEqual(f.progress.uploadComplete, true, "Uppy never counts it uploaded");
    assert.notEqual(f.progress.complete, true);
  });
}

test("waitForVerdict: false keeps upload-success at the bytes' arrival, without a status", { skip }, async () => {
  const uppy = new Uppy6({ id: `v-${randomUUID()}` });
  const user = `user-${randomUUID()}`;
  uppy.use(Mintgate, { endpoint: base, getToken: () => token(user), waitForVerdict: false });
  const post = [];
  uppy.on("postprocess-progress", (f) => post.push(f.id));
  uppy.addFile({ name: "x.png", type: "image/png", data: new File(["<html></html>"], "x.png", { type: "image/png" }) });
  const result = await uppy.upload();
  assert.equal(result.successful.length, 1, "today's behaviour: a success once S3 holds the bytes");
  assert.equal(post.length, 0);
  assert.equal(result.successful[0].response.body.status, undefined);
});

test("a file restored while it waited for its verdict only waits again: no sign, no PUT", { skip }, async () => {
  const user = `user-${randomUUID()}`;
  const page = `page-${randomUUID()}`;
  const data = new File([realPNG(8, 8)], "again.png", { type: "image/png" });
  // The first page: the state Golden Retriever would persist once the
  // bytes are up, taken as the file enters post-processing.
  const a = new Uppy6({ id: page });
  a.use(Mintgate, { endpoint: base, getToken: () => token(user) });
  let persisted;
  a.on("postprocess-progress", (f) => (persisted ??= JSON.parse(JSON.stringify(a.getFile(f.id)))));
  const id = a.addFile({ name: "again.png", type: "image/png", data });
  await a.upload();
  assert.ok(persisted?.mintgate?.uploaded, "the bytes' arrival is in the file's state");
  // The reloaded page: same Uppy id, the same file, the kept state.
  const sent = [];
  const rec = async (url, init = {}) => {
    sent.push(`${init.method ?? "GET"} ${new URL(String(url)).pathname}`);
    return fetch(url, init);
  };
  const b = new Uppy6({ id: page });
  const { Client } = await import("../dist/index.js");
  b.use(Mintgate, { client: new Client({ baseUrl: base, token: token(user), fetch: rec }) });
  const success = [];
  b.on("upload-success", (f, res) => success.push(res.body));
  assert.equal(b.addFile({ name: "again.png", type: "image/png", data }), id);
  b.setFileState(id, { mintgate: persisted.mintgate });
  const r = await b.upload();
  assert.equal(r.failed.length, 0);
  assert.equal(success[0]?.status, "completed");
  assert.equal(success[0].urlId, persisted.mintgate.urlId, "the same grant");
  assert.deepEqual(sent.filter((s) => !s.startsWith("GET /uploads/")), [], "nothing signed or sent again");
});
