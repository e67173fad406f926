// Builds the demo page's script and styles into ../static/dist, which the
// signer embeds (go:embed): one bundle of Uppy (core, Dashboard, Golden
// Retriever) and @mintgate/client (api/js/src), one stylesheet, and Golden
// Retriever's service worker (sw.js), so the page loads nothing from
// another host. Type-checks first. Run by deploy/local/web.sh.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "static", "dist");

execFileSync(process.execPath, [join(here, "node_modules", "typescript", "bin", "tsc"), "-p", join(here, "tsconfig.json")], {
  stdio: "inherit",
});
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await esbuild.build({
  entryPoints: { app: join(here, "src", "main.ts") },
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  legalComments: "linked",
  outdir: out,
  metafile: true,
  logLevel: "warning",
});
// Golden Retriever's service worker, as a classic script: it keeps the
// picked files' bytes across a reload (demo.go serves it for scope /demo/).
const sw = await esbuild.build({
  entryPoints: { sw: join(here, "node_modules", "@uppy", "golden-retriever", "lib", "ServiceWorker.js") },
  bundle: true,
  format: "iife",
  target: "es2020",
  minify: true,
  legalComments: "linked",
  outdir: out,
  metafile: true,
  logLevel: "warning",
});
Object.assign(result.metafile.outputs, sw.metafile.outputs);
// What went into the bundle, for a look (not embedded): node_modules/.meta.json.
writeFileSync(join(here, "node_modules", ".meta.json"), JSON.stringify(result.metafile));
for (const [file, o] of Object.entries(result.metafile.outputs)) {
  console.log(`demo page: ${file} ${(o.bytes / 1024).toFixed(0)} KiB`);
}
