// verifyWebhook against the standardwebhooks npm library (the Standard
// Webhooks specification's reference for JavaScript): what the library
// signs, verifyWebhook accepts; what it refuses, verifyWebhook refuses too.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Webhook } from "standardwebhooks";

import { WebhookVerificationError, verifyWebhook } from "../dist/index.js";

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const other = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=";
const event = {
  type: "upload.completed",
  timestamp: "2026-12-02T10:00:00.000Z",
  data: {
    urlId: "7c9e6679-7425-40de-944b-e07fc1f90ae7", tenant: "acme",
    key: "incoming/acme/7c9e6679-7425-40de-944b-e07fc1f90ae7", size: 1024,
    etag: "d41d8cd98f00b204e9800998ecf8427e", completedAt: "2026-12-02T10:00:00.000Z",
  },
};
const body = JSON.stringify(event);

// signed is a request the library signed under key at time at.
function signed(key, at = new Date(), id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", payload = body) {
  return {
    headers: {
      "webhook-id": id,
      "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
      "webhook-signature": new Webhook(key).sign(id, at, payload),
    },
    payload,
  };
}

// library is the library's verdict: the parsed body, or its error.
function library(key, headers, payload) {
  try {
    return { ok: new Webhook(key).verify(payload, headers) };
  } catch (err) {
    return { err };
  }
}

async function ours(key, headers, payload) {
  try {
    return { ok: await verifyWebhook(key, headers, payload) };
  } catch (err) {
    return { err };
  }
}

test("what the library signs, verifyWebhook accepts and parses", async () => {
  const { headers, payload } = signed(secret);
  assert.deepEqual(library(secret, headers, payload).ok, event);
  assert.deepEqual(await verifyWebhook(secret, headers, payload), event);
  // The same request as bytes, through fetch's Headers, and in Node's
  // shape (any case, arrays).
  assert.deepEqual(await verifyWebhook(secret, new Headers(headers), new TextEncoder().encode(payload)), event);
  const upper = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toUpperCase(), [v]]));
  assert.deepEqual(await verifyWebhook(secret, upper, Buffer.from(payload)), event);
  // A secret given without its whsec_ prefix is the same key.
  assert.deepEqual(await verifyWebhook(secret.slice("whsec_".length), headers, payload), event);
});

test("what the library refuses, verifyWebhook refuses: tampered body, wrong secret, old or future timestamp", async () => {
  const now = Date.now();
  const cases = [
    ["tampered body", () => { const r = signed(secret); return { ...r, payload: r.payload.replace("1024", "1025") }; }, "no_matching_signature"],
    ["wrong secret", () => signed(other), "no_matching_signature"],
    ["other id", () => { const r = signed(secret); return { ...r, headers: { ...r.headers, "webhook-id": "msg_other" } }; }, "no_matching_signature"],
    ["timestamp 6 minutes old", () => signed(secret, new Date(now - 6 * 60_000)), "timestamp_too_old"],
    ["timestamp 6 minutes ahead", () => signed(secret, new Date(now + 6 * 60_000)), "timestamp_too_new"],
    ["no signature", () => { const r = signed(secret); const { "webhook-signature": _, ...h } = r.headers; return { ...r, headers: h }; }, "missing_headers"],
    ["v2 signature", () => { const r = signed(secret); return { ...r, headers: { ...r.headers, "webhook-signature": r.headers["webhook-signature"].replace("v1,", "v2,") } }; }, "no_matching_signature"],
  ];
  for (const [name, make, reason] of cases) {
    const { headers, payload } = make();
    assert.ok(library(secret, headers, payload).err, `${name}: the library accepted it`);
    const got = await ours(secret, headers, payload);
    assert.ok(got.err instanceof WebhookVerificationError, `${name}: verifyWebhook gave ${JSON.stringify(got)}`);
    assert.equal(got.err.reason, reason, name);
  }
});

test("a timestamp within 5 minutes holds, as in the library", async () => {
  for (const offset of [-4 * 60_000, 4 * 60_000]) {
    const { headers, payload } = signed(secret, new Date(Date.now() + offset));
    assert.ok(library(secret, headers, payload).ok);
    assert.deepEqual(await verifyWebhook(secret, headers, payload), event);
  }
  const { headers, payload } = signed(secret, new Date("2026-01-01T00:00:00Z"));
  assert.deepEqual(await verifyWebhook(secret, headers, payload, { now: new Date("2026-01-01T00:04:00Z") }), event);
});

test("any one of several space-separated signatures may match (a secret being rotated)", async () => {
  const { headers, payload } = signed(secret);
  const old = signed(other).headers["webhook-signature"];
  for (const sigs of [`${old} ${headers["webhook-signature"]}`, `${headers["webhook-signature"]} ${old}`, `v1a,xyz ${headers["webhook-signature"]}`]) {
    const h = { ...headers, "webhook-signature": sigs };
    assert.ok(library(secret, h, payload).ok, sigs);
    assert.deepEqual(await verifyWebhook(secret, h, payload), event, sigs);
  }
  const h = { ...headers, "webhook-signature": `${old} v1,!!notbase64` };
  assert.ok(library(secret, h, payload).err);
  await assert.rejects(verifyWebhook(secret, h, payload), { reason: "no_matching_signature" });
});

test("a signature made with WebCrypto by the specification's recipe, the library accepts", async () => {
  // The other way round: the recipe verifyWebhook checks is the library's.
  const id = "msg_recipe";
  const ts = String(Math.floor(Date.now() / 1000));
  const raw = Buffer.from(secret.slice("whsec_".length), "base64");
  const key = await crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${id}.${ts}.${body}`));
  const headers = { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": `v1,${Buffer.from(mac).toString("base64")}` };
  assert.deepEqual(library(secret, headers, body).ok, event);
  assert.deepEqual(await verifyWebhook(secret, headers, body), event);
});

test("a bad secret is refused before anything else", async () => {
  const { headers, payload } = signed(secret);
  await assert.rejects(verifyWebhook("whsec_", headers, payload), { reason: "bad_secret" });
  await assert.rejects(verifyWebhook("whsec_not base64!", headers, payload), { reason: "bad_secret" });
});
