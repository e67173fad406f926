// The demo page: Uppy's Dashboard uploading through @mintgate/client's
// Uppy integration. Each file gets an entry below the Dashboard with its
// kind (single PUT or multipart), each part's progress, the signer's word
// that it completed (GET /uploads/{urlId}), and a countdown while a 429's
// Retry-After is waited out.

import AwsS3 from "@uppy/aws-s3";
import Uppy from "@uppy/core";
import Dashboard from "@uppy/dashboard";
import "@uppy/core/css/style.min.css";
import "@uppy/dashboard/css/style.min.css";

import { Client, type Limits, type Wait } from "../../../../api/js/src/index.js";
import { type PartProgress, mintgateUppy } from "../../../../api/js/src/uppy.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

const tenantInput = $<HTMLInputElement>("tenant");
const tokenInput = $<HTMLInputElement>("token");
const modeBearer = $<HTMLInputElement>("mode-bearer");
const countdown = $<HTMLParagraphElement>("countdown");
const notice = $<HTMLParagraphElement>("notice");
const uploads = $<HTMLOListElement>("uploads");

// ?tenant=acme picks the anonymous tenant. A token is never read from the
// address: one in it is dropped from the history.
const query = new URLSearchParams(location.search);
const tenantParam = query.get("tenant");
if (tenantParam && /^[A-Za-z0-9_-]{1,64}$/.test(tenantParam)) tenantInput.value = tenantParam;
if (query.has("token")) {
  query.delete("token");
  const q = query.toString();
  history.replaceState(null, "", location.pathname + (q ? `?${q}` : "") + location.hash);
}
for (const radio of document.querySelectorAll<HTMLInputElement>('input[name="mode"]')) {
  radio.addEventListener("change", () => {
    tokenInput.disabled = !modeBearer.checked;
    tenantInput.disabled = modeBearer.checked;
  });
}

const MiB = 1024 * 1024;
function bytes(n: number): string {
  if (n >= MiB) return `${(n / MiB).toFixed(n % MiB === 0 ? 0 : 1)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${n} bytes`;
}

// The countdown of a 429: the client waits out Retry-After itself (with
// the same Idempotency-Key) and tells the page here first.
let ticking: number | undefined;
function onWait(w: Wait): void {
  if (w.status !== 429 && w.status !== 503) return;
  const state = w.status === 429 ? "rate-limited" : "unavailable";
  let left = w.seconds;
  const why = `${w.code}${w.scope ? ` (${w.scope})` : ""}`;
  const show = () => {
    countdown.hidden = left <= 0;
    countdown.dataset.seconds = String(left);
    countdown.textContent = `${state}: ${why}; retrying in ${left} s`;
  };
  window.clearInterval(ticking);
  show();
  ticking = window.setInterval(() => {
    left--;
    show();
    if (left <= 0) window.clearInterval(ticking);
  }, 1000);
  const waiting = uploads.querySelectorAll<HTMLElement>('[data-state="signing"], [data-state="rate-limited"], [data-state="unavailable"]');
  for (const e of waiting) setState(e, state, `${why}: the signer asked to wait ${w.seconds} s; the same request goes again then`);
}

const client = new Client({
  token: () => (modeBearer.checked ? tokenInput.value.trim() : ""),
  tenant: () => tenantInput.value.trim(),
  onWait,
});

function entryOf(fileId: string): HTMLLIElement | null {
  return uploads.querySelector<HTMLLIElement>(`li[data-file-id="${CSS.escape(fileId)}"]`);
}

function setState(e: HTMLElement, state: string, text: string): void {
  e.dataset.state = state;
  const s = e.querySelector<HTMLElement>(".state");
  if (s) s.textContent = text;
}

function partBar(e: HTMLElement, n: number, size: number): HTMLProgressElement {
  const list = e.querySelector<HTMLOListElement>(".parts")!;
  let li = list.querySelector<HTMLLIElement>(`li[data-part="${n}"]`);
  if (!li) {
    li = document.createElement("li");
    li.dataset.part = String(n);
    li.dataset.state = "waiting";
    const label = document.createElement("span");
    label.textContent = n === 0 ? "PUT" : `part ${n}`;
    const bar = document.createElement("progress");
    bar.max = size;
    bar.value = 0;
    bar.setAttribute("aria-label", n === 0 ? "the PUT" : `part ${n}`);
    li.append(label, bar);
    list.append(li);
  }
  return li.querySelector("progress")!;
}

function onPart(p: PartProgress): void {
  const e = entryOf(p.fileId);
  if (!e) return;
  const bar = partBar(e, p.partNumber, p.size);
  bar.value = p.loaded;
  bar.parentElement!.dataset.state = p.state;
  if (e.dataset.state !== "uploading") setState(e, "uploading", "uploading to S3…");
}

function describe(e: HTMLElement, fileId: string, limits: Limits, size: number): void {
  const g = mg.grantOf(fileId);
  if (!g) return;
  e.dataset.urlId = g.urlId;
  e.dataset.key = g.key;
  const kind = e.querySelector<HTMLElement>(".kind")!;
  if (g.grant) {
    kind.textContent = `multipart: ${g.grant.partCount} parts of ${bytes(g.grant.partSize)}, ${bytes(size)}`;
    for (let n = 1; n <= g.grant.partCount; n++) {
      partBar(e, n, n < g.grant.partCount ? g.grant.partSize : size - (g.grant.partCount - 1) * g.grant.partSize);
    }
  } else {
    kind.textContent = `single PUT of ${bytes(size)} (up to ${bytes(limits.maxObjectBytes)})`;
    partBar(e, 0, size);
  }
  const id = e.querySelector<HTMLElement>(".urlid")!;
  id.textContent = `urlId ${g.urlId} · key ${g.key}`;
}

let mg: ReturnType<typeof mintgateUppy>;

async function start(): Promise<void> {
  let limits: Limits;
  try {
    limits = await client.limits();
  } catch (err) {
    notice.dataset.state = "error";
    notice.textContent = `The signer's limits could not be read: ${String(err)}`;
    return;
  }
  const uppy = new Uppy({
    autoProceed: true,
    restrictions: {
      maxFileSize: limits.maxMultipartBytes,
      allowedFileTypes: limits.contentTypes,
    },
  });
  mg = mintgateUppy(uppy, client, limits, { onPart });
  uppy.use(Dashboard, {
    target: "#dashboard",
    inline: true,
    width: "100%",
    height: 300,
    proudlyDisplayPoweredByUppy: false,
    note: `Up to ${bytes(limits.maxObjectBytes)} in one PUT, up to ${bytes(limits.maxMultipartBytes)} in parts of ${bytes(limits.partSize)}; ${limits.contentTypes.join(", ")}`,
  });
  uppy.use(AwsS3, { ...mg.options, limit: 4 });

  uppy.on("file-added", (file) => {
    const e = document.createElement("li");
    e.className = "upload";
    e.dataset.fileId = file.id;
    e.dataset.size = String(file.size ?? 0);
    const h = document.createElement("h3");
    h.textContent = `${file.name} (${file.type || "no type"}, ${file.size} bytes)`;
    const kind = document.createElement("p");
    kind.className = "kind";
    const state = document.createElement("p");
    state.className = "state";
    state.setAttribute("role", "status");
    const id = document.createElement("p");
    id.className = "urlid hint";
    const parts = document.createElement("ol");
    parts.className = "parts";
    e.append(h, kind, state, parts, id);
    uploads.prepend(e);
    setState(e, "signing", "asking the signer…");
  });
  uppy.on("upload-progress", (file) => {
    const e = file && entryOf(file.id);
    if (e && !e.dataset.urlId) describe(e, file.id, limits, file.size ?? 0);
  });
  uppy.on("upload-error", (file, err) => {
    const e = file && entryOf(file.id);
    if (e) setState(e, "error", `failed: ${err.message}`);
  });
  uppy.on("upload-success", async (file) => {
    const e = file && entryOf(file.id);
    if (!e || !file) return;
    if (!e.dataset.urlId) describe(e, file.id, limits, file.size ?? 0);
    const urlId = e.dataset.urlId;
    if (!urlId) return;
    setState(e, "confirming", "uploaded; waiting for the completer to see the object…");
    try {
      const s = await client.waitForStatus(urlId, { states: ["completed"], timeoutMs: 120_000 });
      if (s.status === "completed") setState(e, "completed", `completed: S3 holds ${e.dataset.size} bytes at ${e.dataset.key}`);
      else setState(e, "timeout", `the signer still says ${s.status}`);
    } catch (err) {
      setState(e, "error", `status: ${String(err)}`);
    }
  });
  notice.dataset.state = "ready";
  notice.textContent = "Ready: drop a file.";
}

void start();
