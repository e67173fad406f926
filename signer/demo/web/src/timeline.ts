// The timeline of an upload's trace: the page reads the trace from
// Jaeger's query API (/api/traces/{traceId}; the signer names its base URL
// in config.json, from MINTGATE_DEMO_TRACES_URL) and draws each span as a
// bar along the trace's time, sorted by start and grouped by service,
// labelled with its operation and duration: where the upload spent its
// time (the sign, the completer's handling of the PUT's arrival, the
// gate's steps, the webhook tries, or the sweeper's refund).

/** One span of Jaeger's JSON (the fields the timeline reads). */
interface JaegerSpan {
  spanID: string;
  operationName: string;
  processID: string;
  startTime: number; // µs since the epoch
  duration: number; // µs
}

interface JaegerTrace {
  spans: JaegerSpan[];
  processes: Record<string, { serviceName: string }>;
}

/** A span as the timeline draws it. */
export interface Bar {
  service: string;
  name: string;
  start: number; // µs since the epoch
  duration: number; // µs
}

/** fetchTrace reads one trace's spans; none yet (404) is an empty list. */
export async function fetchTrace(base: string, traceId: string, signal?: AbortSignal): Promise<Bar[]> {
  const res = await fetch(`${base.replace(/\/+$/, "")}/api/traces/${encodeURIComponent(traceId)}`, { signal: signal ?? null });
  if (res.status === 404) return [];
  if (!res.ok) throw new Error(`the trace ${traceId}: ${res.status}`);
  const body = (await res.json()) as { data?: JaegerTrace[] };
  const bars: Bar[] = [];
  for (const t of body.data ?? []) {
    for (const s of t.spans) {
      bars.push({ service: t.processes[s.processID]?.serviceName ?? "?", name: s.operationName, start: s.startTime, duration: s.duration });
    }
  }
  return bars;
}

/** ms renders a duration in µs. */
function ms(us: number): string {
  if (us >= 1_000_000) return `${(us / 1_000_000).toFixed(2)} s`;
  if (us >= 1000) return `${(us / 1000).toFixed(1)} ms`;
  return `${us} µs`;
}

/** draw renders bars into el: a group per service (in order of its first span), each span a bar. */
export function draw(el: HTMLElement, traceId: string, bars: Bar[]): void {
  el.replaceChildren();
  el.dataset.traceId = traceId;
  el.dataset.spans = String(bars.length);
  const h = document.createElement("h4");
  h.textContent = `trace ${traceId}`;
  el.append(h);
  if (bars.length === 0) return;
  bars.sort((a, b) => a.start - b.start || b.duration - a.duration);
  const t0 = bars[0]!.start;
  const end = Math.max(...bars.map((b) => b.start + b.duration));
  const total = Math.max(1, end - t0);
  const services = [...new Set(bars.map((b) => b.service))];
  for (const service of services) {
    const group = document.createElement("div");
    group.className = "trace-service";
    group.dataset.service = service;
    const title = document.createElement("h5");
    title.textContent = service;
    group.append(title);
    for (const b of bars.filter((x) => x.service === service)) {
      const row = document.createElement("div");
      row.className = "trace-span";
      const label = document.createElement("span");
      label.className = "trace-label";
      label.textContent = `${b.name} · ${ms(b.duration)}`;
      label.title = `${service}: ${b.name}, +${ms(b.start - t0)}, ${ms(b.duration)}`;
      const track = document.createElement("span");
      track.className = "trace-track";
      const bar = document.createElement("span");
      bar.className = "trace-bar";
      bar.style.left = `${((b.start - t0) / total) * 100}%`;
      bar.style.width = `${Math.max(0.5, (b.duration / total) * 100)}%`;
      track.append(bar);
      row.append(label, track);
      group.append(row);
    }
    el.append(group);
  }
  const foot = document.createElement("p");
  foot.className = "hint";
  foot.textContent = `${bars.length} spans over ${ms(total)}`;
  el.append(foot);
}

/**
 * showTrace polls the trace until it stops growing (the services export
 * their spans in batches, the completer's webhook try last) and draws it
 * each time it does; it gives up quietly after about a minute.
 */
export async function showTrace(el: HTMLElement, base: string, traceId: string): Promise<void> {
  let seen = -1;
  let still = 0;
  for (let i = 0; i < 60 && still < 5; i++) {
    try {
      const bars = await fetchTrace(base, traceId);
      if (bars.length !== seen) {
        seen = bars.length;
        still = 0;
        draw(el, traceId, bars);
      } else if (seen > 0) still++;
    } catch (err) {
      el.dataset.error = String(err);
    }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}
