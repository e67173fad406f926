// The demo page: Uppy 6's Dashboard uploading with @mintgate/client's
// Mintgate plugin, and Golden Retriever to resume after a reload. Each file
// gets an entry below the Dashboard with its kind (single PUT or
// multipart), each part's progress, where the signer says it stands after
// the upload (verifying, completed, or rejected with its reason: the
// plugin waits for the verdict, so the Dashboard shows it too), and a
// countdown while a 429's Retry-After is waited out. When the signer names
// a Jaeger query API (config.json), each sign carries a traceparent of the
// page's own, and a completed upload shows its trace as a timeline.

import Uppy, { debugLogger } from "@uppy/core";
import Dashboard from "@uppy/dashboard";
import GoldenRetriever from "@uppy/golden-retriever";
import "@uppy/core/css/style.min.css";
import "@uppy/dashboard/css/style.min.css";

import { Client, type Limits, type Progress, type StatusResponse, type Wait } from "../../../../api/js/src/index.js";
import { Mintgate, type MintgateFile, RejectedError, grantOf } from "../../../../api/js/src/uppy.js";
import { showTrace } from "./timeline.js";

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
  // A PUT that cannot reach S3 (no CORS rule for this page, say) is told
  // within seconds, not after the default five backoffs.
  retries: 3,
  // The page knows each upload's trace id (client.traceIdOf) to draw it.
  traceparent: true,
});

/** The page's settings from the signer: tracesUrl is the Jaeger query API's base URL, "" for none. */
interface DemoConfig {
  tracesUrl: string;
}

let config: DemoConfig = { tracesUrl: "" };
async function loadConfig(): Promise<void> {
  try {
    const res = await fetch("config.json", { headers: { Accept: "application/json" } });
    if (res.ok) config = { ...config, ...((await res.json()) as Partial<DemoConfig>) };
  } catch {
    // No config: no timelines; the uploads work all the same.
  }
}

/** addTimeline draws a completed upload's trace under its entry, once. */
function addTimeline(e: HTMLElement, urlId: string): void {
  const traceId = client.traceIdOf(urlId);
  if (!config.tracesUrl || !traceId || e.querySelector(".timeline")) return;
  const el = document.createElement("section");
  el.className = "timeline";
  el.setAttribute("aria-label", "the upload's trace");
  e.append(el);
  void showTrace(el, config.tracesUrl, traceId);
}

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

/** describe shows the file's grant once it has one: its kind and a bar per part (or one for the PUT). */
function describe(e: HTMLElement, file: MintgateFile, limits: Limits): void {
  const g = grantOf(file);
  if (!g?.urlId || e.dataset.urlId === g.urlId) return;
  const size = file.size ?? 0;
  e.dataset.urlId = g.urlId;
  e.dataset.key = g.key ?? "";
  const kind = e.querySelector<HTMLElement>(".kind")!;
  if (g.grant) {
    const { partCount, partSize } = g.grant;
    kind.textContent = `multipart: ${partCount} parts of ${bytes(partSize)}, ${bytes(size)}`;
    for (let n = 1; n <= partCount; n++) partBar(e, n, n < partCount ? partSize : size - (partCount - 1) * partSize);
  } else {
    kind.textContent = `single PUT of ${bytes(size)} (up to ${bytes(limits.maxObjectBytes)})`;
    partBar(e, 0, size);
  }
  e.querySelector<HTMLElement>(".urlid")!.textContent = `urlId ${g.urlId} · key ${g.key}`;
}

function onProgress(limits: Limits, file: MintgateFile, p: Progress): void {
  const e = entryOf(file.id);
  if (!e) return;
  describe(e, file, limits);
  if (e.dataset.state !== "uploading") setState(e, "uploading", "uploading to S3…");
  const n = p.part?.partNumber ?? 0;
  const bar = partBar(e, n, p.part?.size ?? p.total);
  bar.value = p.part?.loaded ?? p.loaded;
  bar.parentElement!.dataset.state = p.part ? (p.part.done ? "done" : "uploading") : p.loaded === p.total ? "done" : "uploading";
}

/** addEntry lists a file below the Dashboard (a new one, or one Golden Retriever restored). */
function addEntry(file: MintgateFile, limits: Limits, state: string, text: string): HTMLLIElement {
  const old = entryOf(file.id);
  if (old) return old;
  const e = document.createElement("li");
  e.className = "upload";
  e.dataset.fileId = file.id;
  e.dataset.size = String(file.size ?? 0);
  const h = document.createElement("h3");
  h.textContent = `${file.name} (${file.type || "no type"}, ${file.size} bytes)`;
  const kind = document.createElement("p");
  kind.className = "kind";
  const st = document.createElement("p");
  st.className = "state";
  st.setAttribute("role", "status");
  const id = document.createElement("p");
  id.className = "urlid hint";
  const parts = document.createElement("ol");
  parts.className = "parts";
  e.append(h, kind, st, parts, id);
  uploads.prepend(e);
  setState(e, state, text);
  describe(e, file, limits);
  return e;
}

/** showStatus renders where the signer says an upload stands. */
function showStatus(e: HTMLElement, s: StatusResponse): void {
  switch (s.status) {
    case "verifying":
      setState(e, "verifying", "verifying: the completer is checking the object…");
      break;
    case "completed":
      setState(e, "completed", `completed: S3 holds ${e.dataset.size} bytes at ${e.dataset.key}`);
      addDownload(e, s.urlId);
      addTimeline(e, s.urlId);
      break;
    case "rejected":
      setState(e, "rejected", `rejected: ${s.reason ?? "no reason given"}`);
      break;
    default:
      setState(e, "confirming", `uploaded; the signer says ${s.status}: waiting for the completer…`);
  }
}

/**
 * addDownload links a completed upload: a click asks the signer for a
 * fresh presigned GET (POST /uploads/{urlId}/download) and opens it.
 */
function addDownload(e: HTMLElement, urlId: string): void {
  if (e.querySelector("a.download")) return;
  const a = document.createElement("a");
  a.className = "download";
  a.href = "#";
  a.textContent = "download";
  a.dataset.urlId = urlId;
  a.addEventListener("click", async (ev) => {
    ev.preventDefault();
    try {
      const d = await client.downloadUrl(urlId);
      a.dataset.url = d.url;
      window.open(d.url, "_blank", "noopener");
    } catch (err) {
      setState(e, "error", `download: ${String(err)}`);
    }
  });
  e.append(a);
}

async function confirm(e: HTMLElement, urlId: string): Promise<void> {
  setState(e, "confirming", "uploaded; waiting for the completer to see the object…");
  try {
    const s = await client.waitForStatus(urlId, {
      states: ["completed", "rejected", "aborted", "expired", "refunded"],
      timeoutMs: 120_000,
      onStatus: (s) => showStatus(e, s),
    });
    if (s.status === "pending" || s.status === "verifying") setState(e, "timeout", `the signer still says ${s.status}`);
    else if (s.status !== "completed" && s.status !== "rejected") setState(e, "error", `the signer says ${s.status}`);
  } catch (err) {
    setState(e, "error", `status: ${String(err)}`);
  }
}

/**
 * registerWorker serves Golden Retriever's service worker from the signer
 * (dist/sw.js, scope /demo/): it holds the picked files' bytes across a
 * reload, which IndexedDB does only up to 10 MiB a file. Without it (an
 * http page on another host than localhost), a restored file is a ghost
 * until it is picked again.
 */
async function registerWorker(): Promise<boolean> {
  if (!("serviceWorker" in navigator)) return false;
  try {
    await navigator.serviceWorker.register("dist/sw.js", { scope: "./" });
    return true;
  } catch (err) {
    console.warn("mintgate demo: no service worker", err);
    return false;
  }
}

async function start(): Promise<void> {
  let limits: Limits;
  try {
    [limits] = await Promise.all([client.limits(), loadConfig()]);
  } catch (err) {
    notice.dataset.state = "error";
    notice.textContent = `The signer's limits could not be read: ${String(err)}`;
    return;
  }
  const worker = await registerWorker();
  const uppy = new Uppy({
    id: "mintgate-demo",
    autoProceed: true,
    // ?debug=1: Uppy logs what it does to the console.
    ...(query.has("debug") ? { logger: debugLogger } : {}),
    restrictions: {
      maxFileSize: limits.maxMultipartBytes,
      allowedFileTypes: limits.contentTypes,
    },
  });
  uppy.use(Dashboard, {
    target: "#dashboard",
    inline: true,
    width: "100%",
    height: 300,
    proudlyDisplayPoweredByUppy: false,
    note: `Up to ${bytes(limits.maxObjectBytes)} in one PUT, up to ${bytes(limits.maxMultipartBytes)} in parts of ${bytes(limits.partSize)}; ${limits.contentTypes.join(", ")}`,
  });
  uppy.use(GoldenRetriever, { serviceWorker: worker });
  uppy.use(Mintgate, { client, limit: 2, onProgress: (f, p) => onProgress(limits, f, p) });
  if (query.has("debug")) {
    // For a console, and integration/browser_perf_test.go: the page's own parts.
    Object.assign(window, { mintgate: { client, uppy, Uppy, Mintgate, Client } });
  }

  uppy.on("file-added", (file) => {
    addEntry(file as MintgateFile, limits, "signing", "asking the signer…");
  });
  uppy.on("file-removed", (file) => {
    const e = entryOf(file.id);
    if (e && e.dataset.state !== "completed") setState(e, "cancelled", "cancelled: a multipart upload is aborted and its token given back");
  });
  // The Dashboard shows the verdict itself (the plugin keeps a file in
  // post-processing, "Verifying…", until it); the entry says it too.
  uppy.on("postprocess-progress", (file) => {
    const e = file && entryOf(file.id);
    if (e) setState(e, "verifying", "verifying: the completer is checking the object…");
  });
  uppy.on("upload-error", (file, err) => {
    const e = file && entryOf(file.id);
    if (e && err instanceof RejectedError) setState(e, "rejected", `rejected: ${err.reason}`);
    else if (e) setState(e, "error", `failed: ${err.message}`);
  });
  uppy.on("upload-success", (file) => {
    const e = file && entryOf(file.id);
    if (!e || !file) return;
    describe(e, file as MintgateFile, limits);
    const urlId = e.dataset.urlId;
    if (urlId) void confirm(e, urlId);
  });
  // After a reload: the files Golden Retriever kept, with their grants.
  // Each resumes once its bytes are back (from the service worker, or
  // picked again by the user: Uppy matches name, type, size and date).
  const resumeIfWhole = () => {
    const { recoveredState, files } = uppy.getState();
    if (!recoveredState) return;
    const ghosts = Object.values(files).filter((f) => f.isGhost);
    if (ghosts.length > 0) {
      notice.dataset.state = "restored";
      notice.textContent = `Restored ${Object.keys(files).length} upload(s); pick ${ghosts.map((f) => f.name).join(", ")} again to resume.`;
      return;
    }
    notice.dataset.state = "ready";
    notice.textContent = "Resuming the uploads of before the reload.";
    uppy.emit("restore-confirmed");
  };
  uppy.on("restored", () => {
    for (const f of Object.values(uppy.getState().files)) {
      const file = f as MintgateFile;
      const e = addEntry(file, limits, "restored", "restored after a reload");
      if (file.progress?.uploadComplete && grantOf(file)?.urlId) void confirm(e, grantOf(file)!.urlId!);
    }
    resumeIfWhole();
  });
  uppy.on("file-added", () => resumeIfWhole());
  // Golden Retriever 6.0.0 restores asynchronously and then replaces the
  // files with the ones it kept: a file picked before that is lost. So the
  // page is ready once it restored, or once it evidently had nothing to
  // restore (it tells nothing then; 1.5 s is ample for one IndexedDB read).
  await Promise.race([new Promise((ok) => uppy.once("restored", ok)), new Promise((ok) => setTimeout(ok, 1500))]);
  if (!uppy.getState().recoveredState) {
    notice.dataset.state = "ready";
    notice.textContent = "Ready: drop a file.";
  }
}

void start();
