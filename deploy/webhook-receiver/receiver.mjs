#!/usr/bin/env node
// A webhook endpoint for mintgate's tests and its local stack. Every POST is
// verified with the standardwebhooks npm library (the specification's own
// reference library, never mintgate's code), answered, and recorded; GET
// /deliveries lists the records as JSON, oldest first.
//
//   node receiver.mjs [--addr 127.0.0.1:0] [--secret whsec_...]
//     [--secret-file FILE] [--path-secret /path=whsec_...]... [--fail-first N]
//     [--fail-share F --seed S] [--delay-ms MS] [--record FILE]
//
// --addr         where to listen (port 0: a free one); the first line printed
//                on stdout is the receiver's URL, http://host:port
// --secret       the secret of every path without one of its own
// --secret-file  the same, read from FILE (kept off the command line)
// --path-secret  a path with its own secret (one endpoint per tenant); a POST
//                to a path with no secret at all is 404
// --fail-first   answer 503 to the first N tries of each webhook-id
// --fail-share   answer 503 to this share (0..1) of the tries, chosen by a
//                hash of --seed, the webhook-id and the try's number: the
//                same seed fails the same tries whatever their order
// --delay-ms     wait this long before answering a POST (a slow endpoint)
// --record FILE  append each record to FILE (JSON lines) and read it back at
//                start, so a restarted receiver keeps its list and its counts
//
// A verified try it does not fail is 204; a bad or missing signature (or a
// timestamp outside the library's 5 minutes) is 401. A record is
// {at, path, id, timestamp, type, verified, status, try, data, error}.
import { createHash } from "node:crypto";
import { appendFileSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import { Webhook } from "standardwebhooks";

const maxBody = 1 << 20;

function options(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      addr: { type: "string", default: "127.0.0.1:0" },
      secret: { type: "string" },
      "secret-file": { type: "string" },
      "path-secret": { type: "string", multiple: true, default: [] },
      "fail-first": { type: "string", default: "0" },
      "fail-share": { type: "string", default: "0" },
      seed: { type: "string", default: "0" },
      "delay-ms": { type: "string", default: "0" },
      record: { type: "string" },
    },
  });
  const paths = new Map();
  for (const ps of values["path-secret"]) {
    const eq = ps.indexOf("=");
    if (eq <= 0 || !ps.startsWith("/")) throw new Error(`--path-secret ${ps}: want /path=whsec_...`);
    paths.set(ps.slice(0, eq), new Webhook(ps.slice(eq + 1)));
  }
  const share = Number(values["fail-share"]);
  if (!(share >= 0 && share <= 1)) throw new Error(`--fail-share ${values["fail-share"]}: want 0..1`);
  const [host, port] = splitAddr(values.addr);
  const secret = values["secret-file"] ? readFileSync(values["secret-file"], "utf8").trim() : values.secret;
  return {
    host, port, paths, share,
    any: secret ? new Webhook(secret) : null,
    failFirst: count("--fail-first", values["fail-first"]),
    delay: count("--delay-ms", values["delay-ms"]),
    seed: values.seed,
    record: values.record,
  };
}

function count(name, s) {
  const n = Number(s);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} ${s}: want a whole number >= 0`);
  return n;
}

function splitAddr(addr) {
  const colon = addr.lastIndexOf(":");
  if (colon < 0) throw new Error(`--addr ${addr}: want host:port`);
  return [addr.slice(0, colon).replace(/^\[|\]$/g, ""), count("--addr port", addr.slice(colon + 1))];
}

// failed reports whether try n (1, 2, ...) of webhook-id id is answered 503.
function failed(o, id, n) {
  if (n <= o.failFirst) return true;
  if (o.share <= 0) return false;
  const h = createHash("sha256").update(`${o.seed}:${id}:${n}`).digest();
  return h.readUInt32BE(0) / 2 ** 32 < o.share;
}

function header(req, name) {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(" ") : (v ?? "");
}

// verify checks the body with the library; it returns the parsed payload,
// or throws.
function verify(o, path, body, req) {
  const wh = o.paths.get(path) ?? o.any;
  if (!wh) {
    const err = new Error(`no secret for ${path}`);
    err.status = 404;
    throw err;
  }
  return wh.verify(body, {
    "webhook-id": header(req, "webhook-id"),
    "webhook-timestamp": header(req, "webhook-timestamp"),
    "webhook-signature": header(req, "webhook-signature"),
  });
}

// unverified reads what it can from a body whose signature did not hold,
// for the record only.
function unverified(body) {
  try {
    const p = JSON.parse(body);
    return p && typeof p === "object" ? p : {};
  } catch {
    return {};
  }
}

function receive(o, state, req, body) {
  const path = new URL(req.url, "http://x").pathname;
  const id = header(req, "webhook-id");
  const n = (state.tries.get(id) ?? 0) + 1;
  state.tries.set(id, n);
  const rec = {
    at: new Date().toISOString(), path, id,
    timestamp: header(req, "webhook-timestamp"), type: "", verified: false, status: 0, try: n, data: null,
  };
  let payload;
  try {
    payload = verify(o, path, body, req);
    rec.verified = true;
    rec.status = failed(o, id, n) ? 503 : 204;
  } catch (err) {
    payload = unverified(body);
    rec.status = err.status ?? 401;
    rec.error = String(err.message ?? err);
  }
  rec.type = typeof payload?.type === "string" ? payload.type : "";
  rec.data = payload?.data ?? null;
  return rec;
}

function load(o, state) {
  if (!o.record) return;
  let text;
  try {
    text = readFileSync(o.record, "utf8");
  } catch {
    return;
  }
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const rec = JSON.parse(line);
    state.deliveries.push(rec);
    state.tries.set(rec.id, Math.max(state.tries.get(rec.id) ?? 0, rec.try ?? 1));
  }
}

function answer(res, status, body) {
  if (body === undefined) {
    res.writeHead(status).end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json" }).end(text);
}

function handler(o, state) {
  return (req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    if (req.method === "GET" && path === "/deliveries") return answer(res, 200, state.deliveries);
    if (req.method === "GET" && path === "/healthz") return answer(res, 200, { ok: true });
    if (req.method !== "POST") return answer(res, 405, { error: "method_not_allowed" });
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > maxBody) {
        answer(res, 413, { error: "too_large" });
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => {
      if (size > maxBody) return;
      const rec = receive(o, state, req, Buffer.concat(chunks).toString("utf8"));
      state.deliveries.push(rec);
      if (o.record) appendFileSync(o.record, JSON.stringify(rec) + "\n");
      const reply = () => answer(res, rec.status, rec.status === 204 ? undefined : { error: rec.error ?? "failing_on_purpose" });
      if (o.delay > 0) setTimeout(reply, o.delay);
      else reply();
    });
  };
}

function main() {
  let o;
  try {
    o = options(process.argv.slice(2));
  } catch (err) {
    console.error(`webhook-receiver: ${err.message}`);
    process.exit(2);
  }
  const state = { deliveries: [], tries: new Map() };
  load(o, state);
  const server = createServer(handler(o, state));
  server.listen(o.port, o.host, () => {
    const { address, port } = server.address();
    const host = address.includes(":") ? `[${address}]` : address;
    process.stdout.write(`http://${host}:${port}\n`);
  });
  const stop = () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  server.on("error", (err) => {
    console.error(`webhook-receiver: ${err.message}`);
    process.exit(1);
  });
}

main();
