// mintgate demo upload page: sign → PUT to S3 → poll until completed.
// Plain browser JavaScript, no build step, no dependencies.
'use strict';

(() => {
  const SIGN_URL = '/uploads/sign';
  const STATUS_URL = '/uploads/';
  const POLL_EVERY_MS = 1000;
  const POLL_LIMIT_MS = 2 * 60 * 1000;
  const MAX_JITTER_MS = 1000;
  const TENANT_RE = /^[A-Za-z0-9_-]{1,64}$/;
  // Waits when an answer that asks for a retry carries no usable Retry-After.
  const DEFAULT_WAIT_S = { 409: 1, 429: 5, 503: 5 };

  const $ = (id) => document.getElementById(id);
  const ui = {
    form: $('form'),
    modeAnonymous: $('mode-anonymous'),
    modeBearer: $('mode-bearer'),
    tenant: $('tenant'),
    token: $('token'),
    file: $('file'),
    fileInfo: $('file-info'),
    upload: $('upload'),
    cancel: $('cancel'),
    progress: $('progress'),
    progressBar: $('progress-bar'),
    progressText: $('progress-text'),
    status: $('status'),
    countdown: $('countdown'),
    quota: $('quota'),
    details: $('details'),
  };

  let running = null; // the AbortController of the upload in progress

  // A failure the page explains: a stable code and a human message.
  class PageError extends Error {
    constructor(code, message) {
      super(message);
      this.code = code;
    }
  }

  // ---- configuration: query string, then the form ----

  // A bearer token is never read from the address: a link carrying one would
  // sign its victim in as whoever made the link, and upload into their
  // account. One that is there anyway is ignored and dropped from history.
  function readQuery() {
    const params = new URLSearchParams(location.search);
    const tenant = params.get('tenant');
    if (tenant) ui.tenant.value = tenant;
    if (params.has('token')) {
      params.delete('token');
      const rest = params.toString();
      history.replaceState(null, '', location.pathname + (rest ? '?' + rest : '') + location.hash);
    }
    syncMode();
  }

  function syncMode() {
    const bearer = ui.modeBearer.checked;
    ui.token.disabled = !bearer;
    ui.tenant.disabled = bearer;
  }

  // The headers that say who is asking, for signing and for polling alike.
  function identityHeaders() {
    if (ui.modeBearer.checked) {
      const token = ui.token.value.trim();
      if (!token) throw new PageError('token_missing', 'Enter a bearer token, or switch to anonymous mode.');
      return { Authorization: 'Bearer ' + token };
    }
    const tenant = ui.tenant.value.trim();
    if (!TENANT_RE.test(tenant)) {
      throw new PageError('tenant_invalid', 'A tenant is 1–64 letters, digits, "_" or "-".');
    }
    return { 'X-Tenant-ID': tenant };
  }

  // ---- display ----

  function setStatus(state, text) {
    ui.status.dataset.state = state;
    ui.status.textContent = text;
  }

  function setProgress(percent) {
    const p = Math.max(0, Math.min(100, Math.round(percent)));
    ui.progress.setAttribute('aria-valuenow', String(p));
    ui.progress.setAttribute('aria-valuetext', p + '%');
    // Animate growth only: a reset to 0 must not be seen sliding back.
    ui.progressBar.classList.toggle('instant', p === 0);
    ui.progressBar.style.width = p + '%';
    ui.progressText.textContent = p + '%';
  }

  function formatBytes(n) {
    if (n < 1024) return n + ' bytes';
    const units = ['KiB', 'MiB', 'GiB'];
    let v = n / 1024;
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return v.toFixed(v < 10 ? 1 : 0) + ' ' + units[i] + ' (' + n.toLocaleString('en') + ' bytes)';
  }

  function showFile() {
    const f = ui.file.files[0];
    if (!f) {
      ui.fileInfo.textContent = 'No file chosen.';
    } else {
      ui.fileInfo.textContent = f.name + ' · ' + formatBytes(f.size) + ' · ' + (f.type || 'unknown type');
    }
    setProgress(0);
    ui.details.hidden = true;
    if (!running) {
      setStatus('idle', f ? 'Ready to upload.' : 'Choose a file to begin.');
    }
    ui.upload.disabled = !f || running !== null;
  }

  function showQuota(res) {
    const limit = res.headers.get('RateLimit-Limit');
    const remaining = res.headers.get('RateLimit-Remaining');
    if (limit === null || remaining === null) {
      ui.quota.hidden = true; // what an earlier answer said is stale now
      return;
    }
    ui.quota.hidden = false;
    ui.quota.textContent = 'Signing quota: ' + remaining + ' of ' + limit + ' left.';
  }

  function showDetails(signed, idemKey) {
    $('detail-urlid').textContent = signed.urlId || '';
    $('detail-key').textContent = signed.key || '';
    $('detail-expires').textContent = signed.expiresAt || '';
    $('detail-idem').textContent = idemKey;
    ui.details.hidden = false;
  }

  // ---- timing ----

  function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const id = setTimeout(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        clearTimeout(id);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  // countdown shows the seconds left in #countdown, counted against a
  // deadline (timers drift), and resolves when it reaches zero.
  async function countdown(seconds, signal) {
    const deadline = Date.now() + seconds * 1000;
    ui.countdown.hidden = false;
    try {
      for (;;) {
        const left = Math.ceil((deadline - Date.now()) / 1000);
        if (left <= 0) return;
        ui.countdown.dataset.seconds = String(left);
        ui.countdown.textContent = 'Retrying in ' + left + ' s';
        await sleep(Math.min(1000, deadline - Date.now() - (left - 1) * 1000), signal);
      }
    } finally {
      ui.countdown.hidden = true;
      ui.countdown.textContent = '';
      delete ui.countdown.dataset.seconds;
    }
  }

  // retryAfter reads the integer seconds of Retry-After (falling back to the
  // body's retryAfter, then to a default): never less than one second.
  function retryAfter(res, body) {
    let s = parseInt(res.headers.get('Retry-After') || '', 10);
    if (!(s >= 1) && body && Number.isFinite(body.retryAfter)) s = Math.ceil(body.retryAfter);
    if (!(s >= 1)) s = DEFAULT_WAIT_S[res.status] || 5;
    return s;
  }

  // ---- the three steps ----

  function newIdempotencyKey() {
    if (crypto.randomUUID) return crypto.randomUUID();
    // randomUUID needs a secure context; getRandomValues does not.
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    return h.slice(0, 8) + '-' + h.slice(8, 12) + '-' + h.slice(12, 16) + '-' + h.slice(16, 20) + '-' + h.slice(20);
  }

  async function readJSON(res) {
    try {
      return await res.json();
    } catch {
      return null;
    }
  }

  // sign asks for a presigned PUT, retrying 429, 503 and 409 with the SAME
  // idempotency key after the countdown plus jitter, so a retry that races
  // an earlier success replays it instead of spending another token.
  async function sign(file, idemKey, who, signal) {
    const body = JSON.stringify({ contentType: file.type, contentLength: file.size });
    for (;;) {
      setStatus('signing', 'Asking the signer for an upload URL…');
      let res;
      try {
        res = await fetch(SIGN_URL, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'Idempotency-Key': idemKey, ...who },
          body,
          cache: 'no-store',
          signal,
        });
      } catch (e) {
        if (signal.aborted) throw e;
        throw new PageError('network_error', 'Could not reach the signer: ' + e.message);
      }
      showQuota(res);
      const data = await readJSON(res);
      if (res.status === 200 || res.status === 201) {
        if (!data || !data.url) throw new PageError('bad_response', 'The signer answered without a URL.');
        return data;
      }
      const code = (data && data.error) || 'http_' + res.status;
      const message = (data && data.message) || res.statusText;
      if (res.status === 429 || res.status === 503 || res.status === 409) {
        const wait = retryAfter(res, data);
        let why;
        if (res.status === 429) {
          why = data && data.scope === 'tenant'
            ? 'The tenant has used up its signing quota'
            : 'You have used up your signing quota';
          setStatus('rate-limited', why + ' (' + code + '). The page retries by itself when the countdown ends.');
        } else if (res.status === 503) {
          setStatus('unavailable', 'The signer is temporarily unavailable (' + code + '). The page retries by itself when the countdown ends.');
        } else {
          setStatus('waiting', 'An earlier attempt with this key is still in progress (' + code + '). Asking again shortly.');
        }
        await countdown(wait, signal);
        await sleep(Math.random() * MAX_JITTER_MS, signal);
        continue;
      }
      throw new PageError(code, message);
    }
  }

  // put uploads the file to the presigned URL with every signed header but
  // Content-Length (the browser sets it from the body and refuses it from
  // scripts) and Host.
  function put(signed, file, signal) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open(signed.method || 'PUT', signed.url);
      for (const [name, value] of Object.entries(signed.headers || {})) {
        const lower = name.toLowerCase();
        if (lower === 'content-length' || lower === 'host') continue;
        xhr.setRequestHeader(name, value);
      }
      xhr.upload.onprogress = (e) => {
        if (e.lengthComputable && e.total > 0) setProgress((e.loaded / e.total) * 100);
      };
      xhr.upload.onload = () => setProgress(100);
      xhr.onload = () => {
        if (xhr.status >= 200 && xhr.status < 300) {
          setProgress(100);
          resolve();
          return;
        }
        const m = /<Code>([^<]+)<\/Code>/.exec(xhr.responseText || '');
        const s3code = m ? m[1] : 'HTTP ' + xhr.status;
        let msg = 'S3 refused the upload (' + s3code + ').';
        if (xhr.status === 412) msg = 'This URL was already used: S3 keeps the first upload only (' + s3code + ').';
        if (xhr.status === 403) msg = 'S3 rejected the URL: expired or altered (' + s3code + ').';
        reject(new PageError('s3_' + xhr.status, msg));
      };
      xhr.onerror = () => reject(new PageError('network_error',
        'The upload to S3 failed before it answered (network error, or S3 does not allow this page\'s origin by CORS).'));
      xhr.onabort = () => reject(signal.reason || new DOMException('Aborted', 'AbortError'));
      signal.addEventListener('abort', () => xhr.abort(), { once: true });
      xhr.send(file);
    });
  }

  // poll asks the signer every second whether the completer has seen the
  // object, until it has, the URL expired or was refunded, or two minutes pass.
  async function poll(urlId, who, signal) {
    const deadline = Date.now() + POLL_LIMIT_MS;
    setStatus('confirming', 'Uploaded. Waiting for S3 to confirm the object…');
    while (Date.now() < deadline) {
      await sleep(POLL_EVERY_MS, signal);
      let res;
      try {
        res = await fetch(STATUS_URL + encodeURIComponent(urlId), { headers: who, cache: 'no-store', signal });
      } catch (e) {
        if (signal.aborted) throw e;
        continue; // a network blip: ask again
      }
      const data = await readJSON(res);
      if (res.ok && data) {
        if (data.status === 'completed' || data.status === 'expired' || data.status === 'refunded') return data.status;
        continue;
      }
      if (res.status === 429 || res.status >= 500) continue;
      throw new PageError((data && data.error) || 'http_' + res.status, (data && data.message) || res.statusText);
    }
    return 'timeout';
  }

  async function run(file) {
    const controller = new AbortController();
    running = controller;
    const signal = controller.signal;
    ui.upload.disabled = true;
    ui.file.disabled = true;
    ui.cancel.hidden = false;
    ui.details.hidden = true;
    setProgress(0);
    const idemKey = newIdempotencyKey();
    try {
      const who = identityHeaders();
      const signed = await sign(file, idemKey, who, signal);
      showDetails(signed, idemKey);
      setStatus('uploading', 'Uploading ' + file.name + ' to S3…');
      await put(signed, file, signal);
      const outcome = await poll(signed.urlId, who, signal);
      switch (outcome) {
        case 'completed':
          setStatus('completed', 'Upload completed: S3 has the object and the completer recorded it.');
          break;
        case 'expired':
        case 'refunded':
          setStatus('error', 'The URL ' + outcome + ' before the object was confirmed (' + outcome + ').');
          break;
        default:
          setStatus('timeout', 'No confirmation after ' + POLL_LIMIT_MS / 1000 + ' s; the upload may still be processed.');
      }
    } catch (e) {
      if (signal.aborted) {
        setStatus('cancelled', 'Cancelled.');
      } else if (e instanceof PageError) {
        setStatus('error', 'Error ' + e.code + ': ' + e.message);
      } else {
        setStatus('error', 'Error: ' + (e && e.message ? e.message : String(e)));
      }
    } finally {
      running = null;
      ui.cancel.hidden = true;
      ui.file.disabled = false;
      ui.upload.disabled = !ui.file.files[0];
    }
  }

  ui.form.addEventListener('submit', (e) => {
    e.preventDefault();
    const f = ui.file.files[0];
    if (f && !running) run(f);
  });
  ui.cancel.addEventListener('click', () => {
    if (running) running.abort(new DOMException('Cancelled', 'AbortError'));
  });
  ui.file.addEventListener('change', showFile);
  ui.modeAnonymous.addEventListener('change', syncMode);
  ui.modeBearer.addEventListener('change', syncMode);

  readQuery();
  showFile();
})();
